"""``neuronxcc.nki.typing``: ``tensor`` annotations (nki.typing)."""

from nki.typing import TensorType, mutable_tensor, tensor  # noqa: F401

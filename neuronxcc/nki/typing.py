"""``neuronxcc.nki.typing``: ``tensor`` annotations (nki.typing)."""

from nki.typing import TensorType, tensor  # noqa: F401

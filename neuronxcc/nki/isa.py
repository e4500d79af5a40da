"""``neuronxcc.nki.isa``: the legacy NKI instructions (nki.legacy.isa)."""

import nki.legacy.isa as _legacy

globals().update({k: v for k, v in vars(_legacy).items() if not k.startswith("__")})

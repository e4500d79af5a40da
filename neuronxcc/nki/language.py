"""``neuronxcc.nki.language``: the legacy NKI language (nki.legacy.language)."""

from nki.legacy.language import *  # noqa: F401,F403
from nki.legacy.language import (  # noqa: F401  (names star-import leaves out)
    BlockTensor, LegacyOp, arange, mgrid, par_dim,
)
import nki.legacy.language as _legacy

globals().update({k: v for k, v in vars(_legacy).items() if not k.startswith("__")})

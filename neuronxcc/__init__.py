"""``neuronxcc``, as far as kernels written for the legacy NKI API need it: ``neuronxcc.nki`` is
this project's legacy NKI API (nki.legacy). The Neuron compiler itself is not here."""

from nki._shadowing import warn_if_shadowed as _warn_if_shadowed

_warn_if_shadowed("neuronxcc", __path__[0])

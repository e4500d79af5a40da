"""``neuronxcc``, as far as kernels written for the legacy NKI API need it: ``neuronxcc.nki`` is
this project's legacy NKI API (nki.legacy). The Neuron compiler itself is not here."""

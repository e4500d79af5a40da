"""``neuronxcc.nki``: the legacy NKI API (see nki.legacy), for kernels written before NKI 0.2.
Each kernel prints a migration report to NKI 0.6 when it specialises."""

from nki.legacy import (  # noqa: F401
    BenchmarkResult, LegacyKernel, NkiError, baremetal, benchmark, jit, profile, simulate_kernel,
    trace,
)
from neuronxcc.nki import compiler, isa, language, typing  # noqa: F401,E402

"""``nki``: the Neuron Kernel Interface (NKI 0.6 names and semantics) on nrtsim's simulated
NeuronCore.

    import nki
    import nki.language as nl
    import nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

A kernel specialises once per (shapes, dtypes, constants) into a flat instruction list, checked
against the hardware rules of the target NeuronCore (errors name the kernel's file:line), and
runs in the runtime's C++ interpreter: standalone on NumPy arrays / CPU tensors, or on ``neuron``
tensors as one launch on the simulated core, timed per engine (``kernel.last_run``).
"""

from nki import collectives, isa, language, typing  # noqa: F401
from nki._core import NkiError, NkiSpillWarning  # noqa: F401
from nki._jit import JitKernel, KernelRun, jit, simulate  # noqa: F401
from nki._shadowing import NkiShadowingWarning, warn_if_shadowed as _warn_if_shadowed  # noqa: F401

_warn_if_shadowed("nki", __path__[0])

__version__ = "0.6.0"


def _removed(name, instead):
    def f(*args, **kwargs):
        raise NkiError(f"nki.{name} is not available in NKI 0.x; {instead}")

    f.__name__ = name
    return f


baremetal = _removed("baremetal", "call the @nki.jit kernel on NumPy arrays instead")
benchmark = _removed("benchmark", "call the kernel and read kernel.last_run (modelled timing)")
profile = _removed("profile", "use torch_neuronx.NeuronProfiler around a call on neuron tensors")
simulate_kernel = _removed("simulate_kernel", "use nki.simulate(kernel)(*args)")

__all__ = ["JitKernel", "KernelRun", "NkiError", "NkiSpillWarning", "isa", "jit", "language",
           "simulate", "typing"]

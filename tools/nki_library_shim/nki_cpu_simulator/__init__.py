"""AWS's NKI CPU simulator package as the NKI library's test harness imports it, on this
project's nki: ``nki_cpu_simulator.nki`` is nki itself, and ``nki.cpu_simulate(kernel)[lnc]``
runs a kernel on the host interpreter (an LNC of 2 is a grid of 2 SPMD programs)."""

import sys
import types

import nki
import nki.isa
import nki.language
import nki.typing


class _Simulate:
    def __init__(self, kernel):
        self.kernel = nki.jit(kernel)

    def __getitem__(self, lnc):
        launch = self.kernel if int(lnc) == 1 else self.kernel[int(lnc)]
        return nki.simulate(launch)

    def __call__(self, *args, **kwargs):
        return nki.simulate(self.kernel)(*args, **kwargs)


nki.cpu_simulate = _Simulate
sys.modules[__name__ + ".nki"] = nki
for _sub in ("isa", "language", "typing"):
    sys.modules[f"{__name__}.nki.{_sub}"] = sys.modules[f"nki.{_sub}"]
sys.modules[__name__ + ".nki.isa.constants"] = nki.isa.constants
_dtypes = types.ModuleType(__name__ + ".nki.language.dtypes")
_dtypes.__dict__.update({k: v for k, v in vars(nki.language).items()
                         if isinstance(v, type(nki.language.float32))})
sys.modules[_dtypes.__name__] = _dtypes
sys.modules[__name__ + ".nki.builtin"] = types.ModuleType(__name__ + ".nki.builtin")
sys.modules[__name__ + ".nki.compiler"] = sys.modules["nki.compiler"]
_tensor = types.ModuleType(__name__ + ".nki.tensor")
_tensor.NkiTensor = nki.language.NkiTensor
sys.modules[_tensor.__name__] = _tensor
# `import nki_cpu_simulator.nki.builtin as x` reads attributes of the parent modules.
nki.builtin = sys.modules[__name__ + ".nki.builtin"]
nki.compiler = sys.modules["nki.compiler"]
nki.tensor = _tensor
nki.language.dtypes = _dtypes
nki.dtype = _dtypes  # the harness aliases nki.dtype to the simulator's dtypes module
sys.modules["nki.dtype"] = _dtypes

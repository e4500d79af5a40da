"""Loaded first by `make nki-library` (this directory leads PYTHONPATH): the modules AWS's NKI
library test harness imports besides its kernels, on this project's nki. nki_cpu_simulator is
AWS's CPU simulator package (the harness's --test-mode simulation); neuron_dtypes its dtype
helper; nki.compiler the Neuron compiler's front end: simulation mode never calls it, its trace-only
tests trace the kernel here."""

import sys
import types

import numpy as np


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


class _NotHere:
    """A compiler-only class: simulation mode imports it but never calls it."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("the Neuron compiler is not part of this project; run the harness "
                           "with --test-mode simulation")


def _static_cast(array, dtype):
    """neuron_dtypes.static_cast: a value conversion to `dtype` (NumPy / ml_dtypes types)."""
    name = getattr(dtype, "name", None)
    if isinstance(name, str) and name.endswith("_x4"):
        raise NotImplementedError(f"packing to {name} is not provided here (MX reference data)")
    return np.asarray(array).astype(_np_dtype(dtype))


def _np_dtype(dtype):
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        pass
    try:
        return np.dtype(dtype)
    except TypeError:
        name = getattr(dtype, "name", None)
        return np.dtype(name if isinstance(name, str) else str(dtype))


_dt = _module("neuron_dtypes", static_cast=_static_cast,
              is_float_type=lambda d: np.issubdtype(_np_dtype(d), np.floating) or "float" in str(d),
              sizeinbytes=lambda d: _np_dtype(d).itemsize,
              finfo=lambda d: __import__("ml_dtypes").finfo(_np_dtype(d)))
try:
    import ml_dtypes

    for _n in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3"):
        setattr(_dt, _n, getattr(ml_dtypes, _n))
    _dt.bfloat = ml_dtypes.bfloat16
except ImportError:
    pass
for _n in ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"):
    setattr(_dt, _n, types.SimpleNamespace(name=_n))

class _TracingFrontend:
    """nki.compiler.frontend's ParserFrontend for the harness's trace-only tests (marked
    trace_only: they check what tracing a kernel does, e.g. the library's TensorView shapes and
    strides): compile() specialises the kernel on this project's nki, which traces it (running
    its Python and its kernel_asserts) and compiles nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def compile(self, kernel, inputs=None, target=None, lnc=1, **_ignored):
        import nki
        from nki import _core

        jitted = nki.jit(kernel)
        args, kwargs = jitted._positional((), dict(inputs or {}))
        target = target if target in _core.TARGETS else None
        jitted.specialize(args, kwargs, grid=(max(int(lnc), 1),), target=target)
        return types.SimpleNamespace(module=None)


_module("nki.compiler", __path__=[])
_module("nki.compiler.frontend", NKIFrontend=_TracingFrontend, ParserFrontend=_TracingFrontend)
_module("nki.compiler.ncc_driver", CompiledKernel=_NotHere, CompileOptions=_NotHere)


# The harness's remote-host locking helpers (test/utils/scripts/, not in the published
# repository): simulation mode runs locally and never locks a host.
class _LockStatus:
    ALLOCATED = DRAINED = FLOCK_TIMEOUT = None

    @staticmethod
    def from_exit_code(code):
        raise RuntimeError("remote host locking is not available (simulation runs locally)")


class _LockResult:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("remote host locking is not available (simulation runs locally)")


_module("test.utils.scripts", __path__=[])
_module("test.utils.scripts.remote_lock_scripts", LockResult=_LockResult, LockStatus=_LockStatus)
# Trace analysis of hardware profiles (test/utils/perf_analysis_private.py, not published).
_module("test.utils.perf_analysis_private",
        analyze_trace=lambda *a, **k: (_ for _ in ()).throw(
            RuntimeError("profile analysis needs hardware traces")))

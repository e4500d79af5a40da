"""The legacy NKI API, ``neuronxcc.nki`` (NKI 0.1; AWS's tutorials and reference kernels up to
Neuron SDK 2.27), on this project's NKI 0.6 implementation: ``import neuronxcc.nki as nki``,
``neuronxcc.nki.language`` and ``neuronxcc.nki.isa`` run kernels written for it with its
semantics (index grids, masks, block dims, value-returning instructions, the
``baremetal`` / ``simulate_kernel`` / ``benchmark`` harness). Every legacy construct a kernel
uses is reported once, at the kernel's file:line, with its NKI 0.6 spelling (stderr;
``kernel.migration_report()``), so an author can migrate from the report.
"""

from __future__ import annotations

import inspect

from nki import _core
from nki._core import NkiError  # noqa: F401
from nki._jit import GridLaunch, JitKernel
from nki.legacy import allocation, isa, language, report  # noqa: F401
from nki.legacy.grids import grid_index, mask_target

_core.HOOKS["grid_index"] = grid_index
_core.HOOKS["mask_target"] = mask_target
_core.HOOKS["check_placements"] = allocation.check_placements


class LegacyKernel(JitKernel):
    """A kernel of the legacy API: traced like any NKI kernel, with its legacy constructs
    collected for the migration report."""

    def __init__(self, fn, mode=None, **options):
        super().__init__(fn, platform_target=options.pop("platform_target", None))
        self.mode = mode
        self._uses = []
        self._harness = []
        src = inspect.getsourcefile(fn) or "<unknown>"
        try:
            line = inspect.getsourcelines(fn)[1] if src != "<unknown>" else 0
        except OSError:  # defined where Python keeps no source (stdin, exec)
            line = fn.__code__.co_firstlineno
        self._decorator = (src, line)

    def _make_tracer(self, target, grid):
        tracer = super()._make_tracer(target, grid)
        tracer.legacy_uses = []
        # @ncc.force_auto_alloc: the kernel's direct placements are ignored.
        tracer.auto_alloc_forced = getattr(self, "auto_alloc_forced", False)
        return tracer

    def _trace(self, args, kinds, arrays, kwargs, grid, target):
        import nki.legacy.report as rep

        spec = super()._trace(args, kinds, arrays, kwargs, grid, target)
        uses = getattr(spec, "legacy_uses", None) or []
        entries = [(self._decorator[0], self._decorator[1], "neuronxcc.nki",
                    "import nki; import nki.language as nl; import nki.isa as nisa (the "
                    "neuronxcc.nki namespace fails to compile since NKI 0.4)")]
        if self.mode not in (None, "auto"):
            entries.append((self._decorator[0], self._decorator[1], f"nki.jit(mode='{self.mode}')",
                            "@nki.jit without mode: the arguments' type picks the framework"))
        self._uses = rep.unique(entries + self._harness + rep.take_pending() + uses)
        rep.print_once(self.__name__, id(self), self._uses)
        return spec

    def migration_report(self):
        """[(file, line, legacy construct, NKI 0.6 spelling)] of the latest specialisation."""
        return list(self._uses)


def jit(func=None, mode=None, **options):
    """``@nki.jit`` of the legacy API (mode= is accepted and reported)."""
    if func is None:
        return lambda f: jit(f, mode=mode, **options)
    if isinstance(func, LegacyKernel):
        return func
    return LegacyKernel(func, mode=mode, **options)


def trace(func=None, **options):
    return jit(func, mode="trace", **options)


def _harness(name, spelling, kernel):
    grid = None
    if isinstance(kernel, GridLaunch):  # nki.baremetal(kernel[2]), simulate_kernel(kernel[2], ...)
        kernel, grid = kernel.kernel, kernel.grid
    k = jit(kernel)
    file, line = _core.caller_location()
    k._harness.append((file, line, f"nki.{name}", spelling))
    return k if grid is None else GridLaunch(k, grid)


def baremetal(kernel=None, **options):
    """``nki.baremetal(kernel)(*np_arrays)``: runs the kernel on NumPy arrays (here: on the
    host interpreter)."""
    spelling = "call the @nki.jit kernel on NumPy arrays (standalone run)"
    if kernel is None:
        return lambda k: _harness("baremetal", spelling, k)
    return _harness("baremetal", spelling, kernel)


def simulate_kernel(kernel, *args, **kwargs):
    """``nki.simulate_kernel(kernel, *np_arrays)``: runs it on the host interpreter."""
    k = _harness("simulate_kernel", "nki.simulate(kernel)(*args)", kernel)
    if isinstance(k, GridLaunch):
        return k.kernel.run(args, kwargs, k.grid, host=True)
    return k.run(args, kwargs, host=True)


class _Latency:
    def __init__(self, us):
        self._us = us

    def get_latency_percentile(self, percentile):
        """The modelled latency in µs (the model has no run-to-run spread: every percentile)."""
        return self._us


class BenchmarkResult:
    def __init__(self, run):
        self.nc_latency = _Latency(run.makespan_ns / 1e3)
        self.kernel_run = run


def benchmark(kernel=None, warmup=None, iters=None, device_count=None, save_neff_name=None,
              save_trace_name=None, additional_compile_opt=None, **options):
    """``nki.benchmark(...)(kernel)``: a call runs the kernel and sets ``kernel.benchmark_result``
    whose ``nc_latency.get_latency_percentile(p)`` is the modelled latency in µs."""

    def wrap(k):
        bk = _harness("benchmark", "call the kernel and read kernel.last_run (modelled timing "
                      "here; Neuron Explorer / nrtpy on hardware)", k)
        original = bk.run

        def run(args, kwargs, grid=(1,), host=False):
            out = original(args, kwargs, grid, host)
            bk.benchmark_result = BenchmarkResult(bk.last_run)
            return out

        bk.run = run
        return bk

    return wrap if kernel is None else wrap(kernel)


def profile(kernel=None, working_directory=None, save_neff_name=None, save_trace_name=None,
            profile_nth=None, **options):
    """``nki.profile(...)(kernel)``: runs it; the modelled per-engine timing is kernel.last_run
    (no NEFF / NTFF files: there is no hardware here)."""

    def wrap(k):
        return _harness("profile", "torch_neuronx's profiler around a call on neuron tensors, "
                        "or kernel.last_run", k)

    return wrap if kernel is None else wrap(kernel)


__all__ = ["baremetal", "benchmark", "isa", "jit", "language", "profile", "simulate_kernel"]

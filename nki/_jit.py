"""``nki.jit``: specialisation and dispatch.

A jitted kernel is specialised once per (grid, target, argument shapes and dtypes, constants):
its body runs under a tracer with symbolic HBM tensors, the recorded instructions are checked and
handed to the runtime's interpreter through the package's own binding (``nki._nki.Executable``),
and the result is cached. A call then dispatches on its arguments: NumPy arrays (and CPU tensors)
run standalone on the host; tensors of a registered device (``neuron``, which torch_neuronx
registers with ``register_device``) run there as one launch; fake / meta tensors (torch.compile's
tracing) only get outputs of the right shape. Nothing here imports torch_neuronx: it depends on
nki, not the reverse.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import itertools
import os
import sys

import numpy as np

from nki import _core
from nki import _nki

# The core figures the interpreter times kernels with: _core.ENGINE_MODEL_PATH, set on import.

# What DMA transfers cost (nki/data/dma.ini, with its sources; NRTSIM_DMA_MODEL overrides it).
DMA_MODEL_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dma.ini")
_nki.set_dma_model_path(DMA_MODEL_PATH)

# Devices whose tensors kernels run on, by torch device type: register_device(kind, runner).
_DEVICES = {}


def register_device(kind, runner):
    """Lets kernels run on tensors of device type `kind`. `runner` has ``target(index)`` (the
    platform target of that device: "trn1" / "trn2" / "trn3"), ``current_device()`` and
    ``launch(executable, index, memory, exchange=None)`` -> (printed lines, timeline dict), where
    `executable` is an ``nki._nki.Executable``, `memory` the (address, bytes) of each bound buffer
    and `exchange` nki.collectives' exchange (``nki._nki.collective_exchange()``) for a kernel
    with collectives; and ``core_links(index)``, the device's links that time collectives."""
    _DEVICES[kind] = runner

_TORCH_DTYPES = {
    "float32": "float32", "bfloat16": "bfloat16", "float16": "float16",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "int32": "int32",
    "uint32": "uint32", "int16": "int16", "uint16": "uint16", "int8": "int8", "uint8": "uint8",
    "bool_": "bool", "tfloat32": "float32",
}


def _kind(x):
    if isinstance(x, np.ndarray):
        return "numpy"
    torch = _core.loaded_torch()
    if torch is not None and isinstance(x, torch.Tensor):
        from torch._subclasses.fake_tensor import is_fake

        if is_fake(x) or x.device.type == "meta":
            return "fake"
        if x.device.type in _DEVICES:
            return "device"
        if x.device.type == "cpu":
            return "cpu"
        raise _core.NkiError(f"NKI kernels take CPU or NumPy data, or tensors of a registered "
                             f"device ({', '.join(sorted(_DEVICES)) or 'none registered'}); got "
                             f"a tensor on {x.device}")
    return None


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if not isinstance(value, type) and (dataclasses.is_dataclass(value)
                                        or isinstance(value, _core.NKIObject)):
        # A configuration object (AWS's library passes @dataclass specs and NKIObjects, unhashable
        # as they are mutable, __eq__ field-wise): the kernel specialises on its type and fields.
        items = (vars(value).items() if hasattr(value, "__dict__")
                 else [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)])
        return (type(value).__qualname__, "fields") + tuple(
            (k, _freeze(v)) for k, v in sorted(items))
    try:
        hash(value)
    except TypeError:
        raise _core.NkiError(f"kernel argument {value!r} is neither an array nor a hashable "
                             "constant; kernels specialise on their constants") from None
    return (type(value).__name__, value)


def _target(mode, device):
    override = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    aliases = {"gen2": "trn1", "inf2": "trn1", "gen3": "trn2", "gen4": "trn3"}
    if override:
        override = aliases.get(override, override)
    if override and override not in _core.TARGETS:
        raise _core.NkiError(f"NEURON_PLATFORM_TARGET_OVERRIDE={override!r}: expected one of "
                             f"{', '.join(_core.TARGETS)} (or gen2 / gen3 / gen4)")
    if mode == "device":
        kind, index = device
        return _DEVICES[kind].target(index)
    if override:
        return override
    # On the host: the default device's core when a device is registered, else NeuronCore-v3.
    for runner in _DEVICES.values():
        try:
            return runner.target(0)
        except Exception:  # noqa: BLE001 - a device that cannot say falls back to trn2
            break
    return "trn2"


class KernelRun:
    """The modelled timing of a kernel's latest call: ``makespan_ns`` (first instruction start to
    last instruction end, without the launch's fixed cost), ``busy_ns`` and ``utilization`` per
    engine, ``matmul_flops``, ``tflops`` and ``mfu`` (against the Tensor engine's BF16 peak),
    ``instructions`` per engine, ``dma_bytes``, and ``engine_spans_ns``: per engine used, the
    (start, end) of its first and last instruction from the start of the timeline, which the
    profiler draws on that engine's track."""

    def __init__(self, timeline, printed=(), spills=()):
        self.spills = list(spills)  # [(tile description, bytes moved)]
        self.makespan_ns = timeline["makespan_ns"]
        self.busy_ns = dict(timeline["busy_ns"])
        self.instructions = dict(timeline["instructions"])
        self.matmul_flops = timeline["matmul_flops"]
        self.dma_bytes = timeline["dma_bytes"]
        self.peak_flops_per_ns = timeline["tensor_peak_flops_per_ns"]
        self.engine_spans_ns = {
            e: (timeline["engine_begin_ns"][e], timeline["engine_end_ns"][e])
            for e, n in self.instructions.items() if n}
        span = self.makespan_ns or 1.0
        self.utilization = {e: b / span for e, b in self.busy_ns.items()}
        self.tflops = self.matmul_flops / span / 1e3
        self.mfu = self.matmul_flops / (span * self.peak_flops_per_ns)
        self.printed = list(printed)

    def __repr__(self):
        util = ", ".join(f"{e} {u:.0%}" for e, u in self.utilization.items() if u)
        return (f"KernelRun({self.makespan_ns / 1e3:.2f} us, {self.tflops:.1f} TFLOP/s, "
                f"MFU {self.mfu:.1%}; {util})")


class Specialization:
    """One kernel specialised for one set of argument shapes, dtypes and constants."""

    def __init__(self, kernel, tracer, executable, outputs, structure, n_inputs, mutated,
                 constants=()):
        self.kernel = kernel
        self.target = tracer.target
        self.chip = tracer.spec["chip"]
        self.executable = executable
        self.outputs = outputs  # [(shape, DType, binding or input index)]
        self.structure = structure
        self.n_inputs = n_inputs
        self.mutated = mutated  # input indices the kernel writes
        self.instruction_count = len(tracer.instructions)
        self.locations = tracer.locations
        self.opcodes = [ins.op for ins in tracer.instructions]  # in execution order
        self.constants = list(constants)  # arrays bound after the outputs (nl.shared_constant)
        self.legacy_uses = tracer.legacy_uses  # constructs of the legacy API (nki.legacy)
        self.spills = [(f"{b.memory.name} {b.shape} {b.dtype} from line {b.location[1]}", moved)
                       for b, moved in tracer.spills]
        self._timeline = None

    @property
    def has_collectives(self):
        return _core.OP_COLLECTIVE in self.opcodes

    def timeline(self):
        # The modelled timing depends only on the program and the core (set at import), not on
        # the data: computed once per specialisation, not per call. Collectives are priced on a
        # device's links (the runtime's link model).
        if self._timeline is None:
            self._timeline = self.executable.timeline(self.chip, self.links())
        return self._timeline

    def links(self):
        """The links that price this kernel's collectives: a device's (None without any)."""
        if not self.has_collectives:
            return None
        return next((r.core_links(0) for r in _DEVICES.values() if hasattr(r, "core_links")),
                    None)


def _np_dtype(dt):
    # DType.dtype maps the name (ml_dtypes for bfloat16 / float8); a kernel call can also take
    # torch tensors, which the message says.
    try:
        return dt.dtype
    except _core.NkiError:
        if dt.code in _core.MX_PACKED:
            raise  # its own message: no NumPy dtype at all, torch tensors only
        raise _core.NkiError(f"NumPy has no {dt}: install ml_dtypes for bfloat16 / float8 "
                             "arrays, or pass torch tensors") from None


def _torch_dtype(dt):
    torch = _core.loaded_torch()
    name = _TORCH_DTYPES.get(dt.name)
    if name is None:
        raise _core.NkiError(f"torch has no {dt}; use float8_e4m3fn / float8_e5m2")
    return getattr(torch, name)


# How many instructions the cached specialisations of ALL kernels may hold together: a process
# calling many kernels with many shapes (a test suite parametrised over sequence lengths) keeps
# the recent ones, not all. A cached instruction costs about 2.5 KB resident all told (the
# interpreter's program, the tracer's records, the modelled timeline: 100 MB freed by dropping one
# 41,008-instruction specialisation of AWS's output projection), so the budget is about 2.5 GB.
# One budget per process, not per kernel: per kernel, a suite calling hundreds of kernels grew
# without bound.
_CACHE_INSTRUCTIONS = 1_000_000
# (kernel, key) -> instruction count, least recently used first, across every kernel.
_CACHED = collections.OrderedDict()
_cached_instructions = 0


def _cache_put(kernel, key, spec):
    global _cached_instructions
    kernel._cache[key] = spec
    _cached_instructions -= _CACHED.pop((kernel, key), 0)  # a key dropped from kernel._cache alone
    _CACHED[(kernel, key)] = spec.instruction_count
    _cached_instructions += spec.instruction_count
    while _cached_instructions > _CACHE_INSTRUCTIONS and len(_CACHED) > 1:
        (owner, old), count = _CACHED.popitem(last=False)
        owner._cache.pop(old, None)
        _cached_instructions -= count


def _cache_touch(kernel, key):
    kernel._cache.move_to_end(key)
    if (kernel, key) in _CACHED:
        _CACHED.move_to_end((kernel, key))


def clear_cache():
    """Drops every kernel's cached specialisations (they are traced again on their next call)."""
    global _cached_instructions
    for owner, key in _CACHED:
        owner._cache.pop(key, None)
    _CACHED.clear()
    _cached_instructions = 0


class JitKernel:
    """A kernel decorated with ``@nki.jit``. Call it on arrays; ``kernel[grid](...)`` launches
    an SPMD grid of programs (``nl.program_id`` / ``nl.num_programs``)."""

    def __init__(self, fn, platform_target=None, **options):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.platform_target = platform_target
        # Specialisations by (grid, target, argument shapes / dtypes / constants): no arrays are
        # kept. Least recently used first out (across all kernels) once their programs exceed
        # _CACHE_INSTRUCTIONS.
        self._cache = collections.OrderedDict()
        self.last_run = None

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        grid = tuple(int(g) for g in grid)
        if not grid or any(g < 1 for g in grid):
            raise _core.NkiError(f"kernel[{grid}]: grid sizes must be positive integers")
        return GridLaunch(self, grid)

    def __call__(self, *args, **kwargs):
        return self._call((1,), *args, **kwargs)

    def __repr__(self):
        return f"<nki.jit kernel {self.__name__}>"

    # -- specialisation
    def specialize(self, args, kwargs, grid=(1,), target=None):
        """The specialisation for these arguments (traced on first use)."""
        kinds = [_kind(a) for a in args]
        arrays = [(i, a) for i, a in enumerate(args) if kinds[i] is not None]
        target = target or self.platform_target or _target(
            "device" if "device" in kinds else "host", _device_of(args, kinds))
        key = (grid, target,
               tuple(("A", tuple(a.shape), _core.as_dtype(a.dtype).name) if kinds[i] is not None
                     else ("C", _freeze(a)) for i, a in enumerate(args)),
               tuple(sorted((k, _freeze(v)) for k, v in kwargs.items())),
               _collective_context())
        spec = self._cache.get(key)
        if spec is None:
            spec = self._trace(args, kinds, arrays, kwargs, grid, target)
            _cache_put(self, key, spec)
        else:
            _cache_touch(self, key)
        return spec

    def _make_tracer(self, target, grid):
        return _core.Tracer(self.__name__, target, grid)

    def _check_annotations(self, args, kwargs, kinds):
        from nki.typing import TensorType

        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as e:
            raise _core.NkiError(f"kernel '{self.__name__}': {e}") from None
        for pname, value in bound.arguments.items():
            ann = self.fn.__annotations__.get(pname)
            if isinstance(ann, TensorType) and hasattr(value, "shape"):
                ann.check(pname, value, self.__name__)

    def _trace(self, args, kinds, arrays, kwargs, grid, target):
        self._check_annotations(args, kwargs, kinds)
        tracer = self._make_tracer(target, grid)
        with tracer:
            symbolic = list(args)
            for binding, (i, a) in enumerate(arrays):
                symbolic[i] = tracer.argument(tuple(a.shape), _core.as_dtype(a.dtype), binding,
                                              f"arg{i}")
            result0 = None
            for linear, coords in enumerate(itertools.product(*(range(g) for g in grid))):
                tracer.program = linear
                tracer.program_coords = coords
                result = self.fn(*symbolic, **kwargs)
                if linear == 0:
                    result0 = result
        structure, flat = _flatten(result0)
        outputs = []
        n_inputs = len(arrays)
        bound = {}
        for t in flat:
            if not isinstance(t, _core.Tensor) or t._buffer.on_chip:
                raise _core.NkiError(f"kernel '{self.__name__}' must return HBM tensors "
                                     f"(nl.ndarray(..., buffer=nl.shared_hbm)); got {t!r}")
            buf = t._buffer
            if t.shape != buf.shape:
                # A reshaped view of a whole output (out.reshape(...)) is that output reshaped.
                if (t.offset != 0 or t.numel() != buf.elements or t._dtype is not None
                        or t.strides != _core._contiguous_strides(t.shape)):
                    raise _core.NkiError(f"kernel '{self.__name__}' returns a view of part of a "
                                         "tensor; return whole tensors (or a reshape of one)")
                buf.shape = t.shape
            elif t.offset != 0 or t.strides != _core._contiguous_strides(buf.shape):
                raise _core.NkiError(f"kernel '{self.__name__}' returns a view of a tensor; "
                                     "return whole tensors")
            if buf.binding >= 0 and buf.binding < n_inputs:
                outputs.append((buf.shape, buf.dtype, ("input", buf.binding)))
                continue
            if buf.id not in bound:
                buf.binding = n_inputs + len(bound)
                bound[buf.id] = buf.binding
            outputs.append((buf.shape, buf.dtype, ("output", bound[buf.id] - n_inputs)))
        mutated = sorted({v._buffer.binding for ins in tracer.instructions
                          for v in (ins.dst, ins.views.get("d"), ins.views.get("f"))
                          if v is not None and 0 <= v._buffer.binding < n_inputs})
        constants = []
        for buf in tracer.buffers:
            if getattr(buf, "constant", None) is not None:
                buf.binding = n_inputs + len(bound) + len(constants)
                constants.append(buf.constant)
        buffers, instructions = tracer.finalize()
        executable = _nki.Executable(self.__name__, buffers, instructions)
        return Specialization(self, tracer, executable, outputs, structure, n_inputs, mutated,
                              constants)

    # -- calls
    def _call(self, grid, *args, **kwargs):
        if _core.current_tracer(optional=True) is not None:
            return self.fn(*args, **kwargs)  # a kernel called from a kernel is inlined
        return self.run(args, kwargs, grid)

    def _positional(self, args, kwargs):
        """Arrays passed by keyword become positional (kernels specialise on positions)."""
        if not any(_kind(v) is not None for v in kwargs.values()):
            return args, kwargs
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as e:
            raise _core.NkiError(f"kernel '{self.__name__}': {e}") from None
        bound.apply_defaults()
        params = inspect.signature(self.fn).parameters
        if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params.values()):
            raise _core.NkiError(f"kernel '{self.__name__}': pass arrays positionally to a kernel "
                                 "with keyword-only or variadic parameters")
        return tuple(bound.arguments[name] for name in params), {}

    def run(self, args, kwargs, grid=(1,), host=False):
        args, kwargs = self._positional(args, kwargs)
        kinds = [_kind(a) for a in args]
        present = {k for k in kinds if k is not None}
        if not present:
            raise _core.NkiError(f"kernel '{self.__name__}' got no arrays or tensors")
        if "numpy" in present and len(present) > 1:
            raise _core.NkiError(f"kernel '{self.__name__}': mix of NumPy arrays and torch "
                                 "tensors; pass one kind")
        if "device" in present and "cpu" in present:
            raise _core.NkiError(f"kernel '{self.__name__}': mix of device and CPU tensors; "
                                 "move them to one device")
        spec = self.specialize(args, kwargs, grid)
        arrays = [a for a, k in zip(args, kinds) if k is not None]
        if "fake" in present:
            return _fake_outputs(spec, arrays)
        if "device" in present and not host:
            devices = {a.device for a in arrays}
            if len(devices) > 1:
                raise _core.NkiError(f"kernel '{self.__name__}': tensors on {sorted(map(str, devices))}; "
                                     "an NKI kernel runs on one NeuronCore")
            return self._run_device(spec, arrays, devices.pop())
        return self._run_host(spec, arrays, "numpy" in present)

    def _run_host(self, spec, arrays, numpy):
        torch = _core.loaded_torch()
        if numpy:
            inputs = [np.ascontiguousarray(a) for a in arrays]
            fresh = [np.empty(shape, dtype=_np_dtype(dt)) for shape, dt, (kind, _) in spec.outputs
                     if kind == "output"]
            memory = [(a.ctypes.data, a.nbytes) for a in inputs + fresh + spec.constants]
        else:
            inputs = [a.detach().contiguous() for a in arrays]
            fresh = [torch.empty(shape, dtype=_torch_dtype(dt)) for shape, dt, (kind, _)
                     in spec.outputs if kind == "output"]
            memory = [(t.data_ptr(), t.numel() * t.element_size()) for t in inputs + fresh]
            memory += [(c.ctypes.data, c.nbytes) for c in spec.constants]
        try:
            printed, loop_iterations = spec.executable.run_host(memory)
        except ValueError as e:
            raise _runtime_error(self.__name__, spec, e) from None
        for i in spec.mutated:
            if not _same_memory(inputs[i], arrays[i]):
                if numpy:
                    arrays[i][...] = inputs[i]
                else:
                    with torch.no_grad():
                        arrays[i].copy_(inputs[i])
        # A kernel with device loops costs what its loops' bodies ran this time (the counts
        # are runtime values); the others' timing is the same every call.
        timeline = (spec.executable.timeline(spec.chip, spec.links(), loop_iterations)
                    if loop_iterations else spec.timeline())
        self.last_run = KernelRun(timeline, printed, spec.spills)
        _print(printed)
        return _outputs(spec, arrays, fresh)

    def _run_device(self, spec, arrays, device):
        torch = _core.loaded_torch()
        inputs = [a.detach().contiguous() for a in arrays]
        fresh = [torch.empty(shape, dtype=_torch_dtype(dt), device=device)
                 for shape, dt, (kind, _) in spec.outputs if kind == "output"]
        runner = _DEVICES[device.type]
        index = device.index if device.index is not None else runner.current_device()
        constants = [torch.from_numpy(c).to(device) for c in spec.constants]
        memory = [(t.data_ptr(), t.numel() * t.element_size()) for t in inputs + fresh + constants]
        if spec.has_collectives:
            printed, timeline = runner.launch(spec.executable, index, memory,
                                              exchange=_nki.collective_exchange())
        else:
            printed, timeline = runner.launch(spec.executable, index, memory)
        for i in spec.mutated:
            if not _same_memory(inputs[i], arrays[i]):
                with torch.no_grad():
                    arrays[i].copy_(inputs[i])
        self.last_run = KernelRun(timeline, printed, spec.spills)
        _print(printed)
        return _outputs(spec, arrays, fresh)


def _collective_context():
    """This process's (rank, world size) once nki.collectives is in use: kernels with
    collectives specialise on the rank (rank_id(), the sub-group's size)."""
    collectives = sys.modules.get("nki.collectives")
    return None if collectives is None else collectives.context()


def _same_memory(staged, array):
    """Whether the contiguous copy a kernel ran on is the caller's array itself (then the
    kernel's writes are already there; ``.detach()`` makes a new tensor object over the same
    memory)."""
    if staged is array:
        return True
    if isinstance(array, np.ndarray):
        return False
    return (staged.data_ptr() == array.data_ptr() and staged.shape == array.shape
            and staged.stride() == array.stride() and staged.dtype == array.dtype)


def _device_of(args, kinds):
    for a, k in zip(args, kinds):
        if k == "device":
            runner = _DEVICES[a.device.type]
            return a.device.type, (a.device.index if a.device.index is not None
                                   else runner.current_device())
    return None


class GridLaunch:
    """``kernel[grid]``: the kernel launched as an SPMD grid of programs."""

    def __init__(self, kernel, grid):
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args, **kwargs):
        return self.kernel._call(self.grid, *args, **kwargs)


def _print(lines):
    for line in lines:
        print(line)


def _flatten(result):
    if result is None:
        return ("none",), []
    if isinstance(result, _core.Tensor):
        return ("one",), [result]
    if isinstance(result, (tuple, list)):
        flat = list(result)
        return (type(result).__name__, len(flat)), flat
    raise _core.NkiError(f"a kernel returns an HBM tensor, a tuple / list of them, or None; got "
                         f"{type(result).__name__}")


def _outputs(spec, arrays, fresh):
    values = [arrays[i] if kind == "input" else fresh[i] for _, _, (kind, i) in spec.outputs]
    tag = spec.structure[0]
    if tag == "none":
        return None
    if tag == "one":
        return values[0]
    return tuple(values) if tag == "tuple" else list(values)


def _fake_outputs(spec, arrays):
    torch = _core.loaded_torch()
    device = arrays[0].device
    fresh = [torch.empty(shape, dtype=_torch_dtype(dt), device=device)
             for shape, dt, (kind, _) in spec.outputs if kind == "output"]
    return _outputs(spec, arrays, fresh)


def jit(fn=None, *, platform_target=None, mode=None, **options):
    """Marks a kernel: ``@nki.jit`` or ``@nki.jit(platform_target="trn2")``."""
    if fn is None:
        return lambda f: JitKernel(f, platform_target=platform_target, **options)
    if isinstance(fn, JitKernel):
        return fn
    return JitKernel(fn, platform_target=platform_target, **options)


def _runtime_error(name, spec, e):
    """An error the interpreter raised while the kernel ran (a runtime offset out of range, a
    device loop that does not end), as an NkiError at the kernel's file:line."""
    import re

    found = re.search(r"instruction (\d+) \(", str(e))
    if found and int(found.group(1)) < len(spec.locations):
        file, line = spec.locations[int(found.group(1))]
        return _core.NkiError(f"{file}:{line} in kernel '{name}': {e}")
    return _core.NkiError(f"kernel '{name}': {e}")


def simulate(kernel):
    """``nki.simulate(kernel)(*args)`` (or ``nki.simulate(kernel[2])``): run on the host
    interpreter whatever the arguments' device (torch tensors in, torch tensors out; NumPy in,
    NumPy out)."""
    grid = (1,)
    if isinstance(kernel, GridLaunch):
        kernel, grid = kernel.kernel, kernel.grid
    kernel = jit(kernel)

    def run(*args, **kwargs):
        return kernel.run(args, kwargs, grid, host=True)

    return run



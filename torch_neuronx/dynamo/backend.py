"""``torch.compile(backend="neuron")``.

Dynamo's graph goes through AOTAutograd (forward, backward and inference graphs at the ATen level,
with Inductor's decomposition table) and each graph becomes one *program*: Inductor compiles it
for the CPU, and the program runs that code over host views of its neuron inputs with its results
allocated in HBM (``_C._ProgramLauncher``) — the service eager kernels use (csrc/backend/core/
HostView) — as ONE launch record of kind ``program`` that carries the work of the graph, asked of
the op-work table per op at compile time (program_work.py). docs/compile.md says why this route
and what is left.
"""

import contextlib
import functools
import itertools
import logging
import pickle
import threading
import time
import warnings

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
from torch._inductor.output_code import OutputCode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from torch_neuronx import _C, _env
from torch_neuronx.dynamo import (attention, default_backend, device_interface, inductor_fixes,
                                  legality, metrics, program_cache, program_work, progress,
                                  random_ops)

# Dynamo asks this interface about the device of the tensors it traces (current device, streams,
# properties): registered with the backend, which is what brings Dynamo in.
device_interface.register()
# compiled.generate(...) that runs eagerly (0 programs) says so.
default_backend.install_generate_check()

_FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
_STATIC_ENV = "TORCH_NEURONX_STATIC_SHAPES"
_NO_AUTOCOPY_ENV = "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"
_CPP_WRAPPER_ENV = "TORCH_NEURONX_CPP_WRAPPER"
_KNOWN_OPTIONS = {"model_name", "fallback_execution", "static_shapes", "cpp_wrapper"}
_graph_ids = itertools.count()
_log = logging.getLogger(__name__)
# Set while neuron_backend runs: the forward program compiles inside it (its time is counted
# there), the backward program too with the program cache on, else at the first backward().
_inside_backend = threading.local()
# The backend call a graph entry's programs are loaded for (their names follow its graph).
_loading = threading.local()


class NeuronCompileError(RuntimeError):
    """A graph that cannot become a neuron program (names the op and what to do)."""


def _is_neuron(device) -> bool:
    return isinstance(device, torch.device) and device.type == "neuron"


def _switch(options: dict, key: str, env: str) -> bool:
    """An on/off setting: `options[key]` if given, else the variable `env` (torch_neuronx._env:
    its default when unset, an error naming the accepted words for another value)."""
    if key in options:
        return bool(options[key])
    return _env.switch(env)


def _fallback_allowed(options: dict) -> bool:
    # TorchNeuron 2.33's default: fallback disabled, a graph that cannot compile raises.
    return not _env.switch(_FALLBACK_ENV) if "fallback_execution" not in options else bool(
        options["fallback_execution"])


def _static_shapes(options: dict) -> bool:
    """Strict mode: TorchNeuron's static-shape behaviour (one program per input shape)."""
    return _switch(options, "static_shapes", _STATIC_ENV)


def _cpp_wrapper(options: dict) -> bool:
    """Whether programs are compiled in Inductor's C++ wrapper mode (on by default).

    The wrapper is the code that allocates a program's buffers and calls its kernels in turn.
    Inductor's default writes it in Python, a few microseconds per kernel at every call; its C++
    wrapper mode compiles it too. Measured on the tiny Llama (bench/compile.py): the decode step
    0.88-1.01x Inductor CPU's time instead of 1.03-1.09x, the training step 0.97-1.01x instead of
    1.01-1.03x (docs/benchmarks.md)."""
    return _switch(options, "cpp_wrapper", _CPP_WRAPPER_ENV)


def _is_symbolic(example_inputs) -> bool:
    return any(
        isinstance(x, torch.SymInt)
        or (isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape))
        for x in example_inputs
    )


class _ProgramPerShape:
    """Strict mode's answer to a symbolic Dynamo graph: the graph is compiled again for each
    distinct set of input shapes (from the call's own tensors), as TorchNeuron would, and each
    new shape after the first counts as a recompile."""

    def __init__(self, compile_for, base_name: str):
        self._compile_for = compile_for
        self._base_name = base_name
        self._compiled: dict = {}

    def __call__(self, *args):
        key = tuple(
            (tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
            for a in args
        )
        run = self._compiled.get(key)
        if run is None:
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            if self._compiled:
                metrics.record_recompile(
                    f"{self._base_name}: static shapes ({_STATIC_ENV}): new input shapes {shapes}")
            run = torch._dynamo.disable(_timed_compile)(
                self._compile_for, list(args), f"{self._base_name} for input shapes {shapes}")
            self._compiled[key] = run
        return run(*args)


def _check_runnable(gm: torch.fx.GraphModule, name: str) -> None:
    """Every op of a program must have code the CPU program can run: an Inductor lowering or a
    CPU or composite kernel. An operator with only device kernels (a custom op registered for
    neuron alone, or ATen's *_overrideable ops that exist for PrivateUse1 backends) cannot be
    part of a program."""
    from torch._inductor.lowering import lowerings

    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        op = node.target
        # ATen's *_overrideable ops have a default kernel that only raises "not implemented"
        # (Inductor registers them as fallbacks, i.e. calls to that kernel), unless a CPU kernel
        # was registered for them (csrc/backend/ops/Attention.cpp does for fused attention).
        device_only = (op.namespace == "aten" and "_overrideable" in op._opname
                       and not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU"))
        lowered = op.namespace == "prims" or op in lowerings or op.overloadpacket in lowerings
        if lowered and not device_only:
            continue
        qualified = op.name()
        if not device_only and any(
            torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)
            for key in ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd")
        ):
            continue
        raise NeuronCompileError(
            f"torch.compile(backend='neuron'): graph {name} cannot be compiled: operator "
            f"{op.namespace}::{op._opname}.{op._overloadname} has no implementation a compiled "
            f"program can run (no CPU or composite kernel, only device kernels). Register a CPU "
            f"kernel for it (torch.library), keep it out of the compiled region "
            f"(torch.compiler.disable), or set {_FALLBACK_ENV}=0 (or options="
            f"{{'fallback_execution': True}}) to run the graph eagerly."
        )


def _on_cpu(value):
    if _is_neuron(value):
        return torch.device("cpu")
    return value


def _constants_on_cpu(gm: torch.fx.GraphModule) -> None:
    """Tensors the graph reads as attributes (constants such as ``torch.tensor([...],
    device="neuron")`` in the compiled code): a CPU copy, made once at compile time, which the CPU
    program reads instead. AOTAutograd passes parameters, buffers and anything mutated as inputs,
    so these are never written."""
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        *path, name = node.target.split(".")
        owner = gm
        for part in path:
            owner = getattr(owner, part)
        value = getattr(owner, name)
        if isinstance(value, torch.Tensor) and _is_neuron(value.device):
            # A real copy, even though the compiler runs under AOTAutograd's fake mode.
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                on_cpu = value.detach().cpu()
            if isinstance(value, torch.nn.Parameter):
                on_cpu = torch.nn.Parameter(on_cpu, requires_grad=value.requires_grad)
            setattr(owner, name, on_cpu)


def _integer_histc_in_float64(cpu_gm: torch.fx.GraphModule) -> None:
    """histc of an integer tensor, which neuron has (as CUDA; transformers' MoE routing counts
    tokens per expert with it) and the CPU does not: counted in float64 and returned in the
    input's dtype, as the eager neuron kernel computes it."""
    for node in list(cpu_gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.histc.default:
            continue
        source = node.args[0]
        val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        if val is None or val.dtype.is_floating_point or val.dtype.is_complex:
            continue
        with cpu_gm.graph.inserting_before(node):
            # prims' conversion: what AOTAutograd's decompositions leave for Inductor.
            as_float = cpu_gm.graph.call_function(
                torch.ops.prims.convert_element_type.default, (source, torch.float64))
        node.args = (as_float, *node.args[1:])
        with cpu_gm.graph.inserting_after(node):
            back = cpu_gm.graph.call_function(
                torch.ops.prims.convert_element_type.default, (node, val.dtype))
        node.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
    cpu_gm.recompile()


def _graph_for_cpu(gm: torch.fx.GraphModule, example_inputs, fake_mode, device: int):
    """A copy of `gm` whose device arguments name the CPU, re-propagated with CPU fake inputs,
    and whether Inductor's C++ wrapper can call all of its ops (see attention.py)."""
    graph = torch.fx.Graph()
    outputs = graph.graph_copy(gm.graph, {})
    graph.output(outputs)
    for node in graph.nodes:
        node.args = torch.fx.node.map_aggregate(node.args, _on_cpu)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, _on_cpu)
    cpu_gm = torch.fx.GraphModule(gm, graph)
    _constants_on_cpu(cpu_gm)
    random_ops.draw_from_device(cpu_gm, device)
    _integer_histc_in_float64(cpu_gm)
    wrappable = attention.use_cpu_attention_ops(cpu_gm) and _only_aten_ops(cpu_gm)
    cpu_inputs = []
    with fake_mode:
        for x in example_inputs:
            if isinstance(x, torch.Tensor) and _is_neuron(x.device):
                x = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu")
            cpu_inputs.append(x)
    _CpuFakeTensorProp(cpu_gm, mode=fake_mode).propagate_dont_convert_inputs(*cpu_inputs)
    cpu_gm.recompile()
    return cpu_gm, cpu_inputs, wrappable


def _only_aten_ops(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph calls ATen ops and our C++ ops only (the random draws of
    csrc/backend/ops/Random.cpp, which Inductor's C++ wrapper calls through the dispatcher).
    Inductor's C++ wrapper calls another library's op (an NKI kernel, a user's Python op) through
    a Python callback, a path that crashed on an NKI kernel in a program where the Python wrapper
    runs it fine: such programs keep the Python wrapper."""
    return all(not isinstance(n.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket,
                                         torch._ops.HigherOrderOperator))
               or (isinstance(n.target, torch._ops.OpOverload)
                   and n.target.namespace in ("aten", "prims", "neuron_program"))
               for n in gm.graph.nodes if n.op == "call_function")


class _CpuFakeTensorProp(FakeTensorProp):
    """Fake-tensor propagation of a program's CPU graph. The graph was traced with the layouts
    eager neuron would produce, but a backward program receives the tensors its forward program
    saved in the layouts Inductor chose for them (AOTAutograd compiles the backward with the
    saved tensors' real strides), and a `view` valid on the traced layout can then be impossible:
    such a view becomes a `reshape` (a view where possible, else a copy; the graph is functional,
    so nothing writes through it), which is what Inductor's own view lowering does in that case.
    Found by mamba2's chunked scan in the causal-LM sweep's compiled column."""

    def run_node(self, node):
        try:
            return super().run_node(node)
        except Exception:
            if node.op != "call_function" or node.target is not torch.ops.aten.view.default:
                raise
        node.target = torch.ops.aten.reshape.default
        return super().run_node(node)


def _output_devices(gm: torch.fx.GraphModule) -> list:
    """Per graph output: the neuron index it lives on, -1 for a CPU tensor, None otherwise."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    devices = []
    for arg in output.args[0]:
        val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            devices.append((val.device.index or 0) if _is_neuron(val.device) else -1)
        else:
            devices.append(None)
    return devices


def _program_device(example_inputs, output_devices):
    devices = {x.device.index or 0 for x in example_inputs
               if isinstance(x, torch.Tensor) and _is_neuron(x.device)}
    devices |= {d for d in output_devices if d is not None and d >= 0}
    if len(devices) > 1:
        raise NeuronCompileError(
            f"torch.compile(backend='neuron'): one graph uses tensors on neuron devices "
            f"{sorted(devices)}; a program runs on one device. Move the tensors to one device, "
            f"or split the work per device.")
    return devices.pop() if devices else None


class _Program(OutputCode):
    """One compiled graph: its CPU code run as one launch record per call. Boxed calling
    convention (takes the argument list and empties it, so inputs free as early as possible);
    AOTAutograd's wrapper around backward programs calls with the arguments unpacked instead.
    A graph's inputs are tensors and sizes, never a list, so the two cannot be confused.

    The launch itself is C++ (``_C._ProgramLauncher``, csrc/backend/compiler/ProgramLaunch.cpp),
    built once here: a call of a static graph does no more Python than this method, and a program
    built with Inductor's C++ wrapper is called by the launcher directly (_cpp_wrapper_library):
    one call from Python into C++ per launch.

    A program is also AOTAutograd's output code, so a graph entry of the program cache
    (program_cache.GraphStore) can hold it: serialized it keeps what it is (name, kind, device,
    cost, Trainium legality findings) and the key of its program entry, not its code, which
    :meth:`post_compile` loads from that entry on a restart."""

    _fx_graph_cache_key = None  # not Inductor's FX graph: AOTAutograd bundles programs whole
    cpp_wrapper = False  # as in graph entries written before programs had C++ wrappers

    def __init__(self, name, kind, device, compiled, cost, output_devices, issues, entry_key,
                 cpp_wrapper=False):
        self.name = name
        self.kind = kind
        self.device = device
        self.compiled = compiled
        self.cost = cost
        self.output_devices = output_devices
        self.issues = issues
        self.entry_key = entry_key
        self.cpp_wrapper = cpp_wrapper  # Inductor's C++ wrapper calls its kernels (else Python)
        self._dynamic = cost.is_dynamic
        # On the instance, not the class: AOTAutograd's wrapper around an inference program
        # copies the program's __dict__, and without the flag it would call the program unboxed.
        self._boxed_call = True
        self._start()

    def _start(self) -> None:
        cost = self.cost
        self._launch = _C._ProgramLauncher(
            self.device, self.name, cost.work([]) if not self._dynamic else None, self.compiled,
            self.output_devices,
            _cpp_wrapper_library(self.compiled) if self.cpp_wrapper else None)

    # OutputCode: a program in a graph entry of the program cache ----------------------------
    def prepare_for_serialization(self) -> None:
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        if self.entry_key is None:
            raise BypassAOTAutogradCache(
                f"{self.name} has no program cache entry (Inductor did not cache its graph)")
        self.compiled = None
        self._launch = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self._launch is not None:
            return  # compiled in this process: Inductor's post-compile steps have run
        from torch._inductor.codecache import FxGraphCache

        fx_graph = program_cache.load_program(self.entry_key)
        if fx_graph is None:
            # AOTAutograd takes this for a miss of the graph entry and compiles the graph: the
            # program compile reports a corrupted entry and rebuilds it.
            raise NeuronCompileError(f"program cache entry of {self.name} is gone")
        compiled, _ = FxGraphCache.cache_hit_post_compile(pickle.loads(fx_graph), {}, constants)
        if compiled is None:
            raise NeuronCompileError(f"{self.name}: Inductor could not load its cached code")
        compiled.post_compile(example_inputs, constants, graph_kwargs)
        self.compiled = compiled
        self.name = f"neuron::program/{_loading.base_name}_{self.kind}"
        if self.issues:
            _report_legality(self.name, self.issues)
        self._start()
        metrics.record("programs")
        _record_wrapper(self)
        metrics.record("cache_hits")

    def set_triton_bundle(self, triton_bundle) -> None:
        pass  # CPU code: no Triton kernels

    def __call__(self, *call_args):
        if len(call_args) == 1 and isinstance(call_args[0], list):
            args = call_args[0]
        else:
            args = list(call_args)
        if self._dynamic:
            seen = self.cost.sizes_seen()
            work = self.cost.work(args)
            if self.cost.sizes_seen() > max(seen, 1):
                # A shape this symbolic program serves without compiling: TorchNeuron, static
                # shapes only, would compile this graph again (and recompile the frame, for a
                # forward).
                metrics.record_static_shape_recompile(frame=self.kind != "backward")
            outputs = self._launch(args, work)
        else:
            outputs = self._launch(args)
        args.clear()
        metrics.record("program_launches")
        return outputs


def _cpp_wrapper_library(compiled):
    """The shared library of a program's C++ wrapper, when the launcher can call its entry
    function directly instead of Inductor's Python callable around it; else None.

    That callable (torch 2.13, codegen/cpp_wrapper_cpu.py) turns its arguments into tensor handles
    (a size into a 0-dim tensor), calls the library's module function, and turns the returned
    handles into tensors, all of which the launcher does in C++. It is called directly only when
    the callable is exactly that (not wrapped by Inductor, e.g. to realign inputs), appends no
    constants to the inputs, and returns tensors only (not a size taken with .item())."""
    call = getattr(compiled, "current_callable", None)
    code = getattr(call, "__code__", None)
    if code is None or code.co_name != "g" or not call.__closure__:
        return None
    if "constants_tensor" in code.co_varnames or "item" in code.co_names:
        return None  # (then every output that is not a tensor is None: a null handle)
    entry = dict(zip(code.co_freevars, (c.cell_contents for c in call.__closure__))).get("f")
    if getattr(entry, "__name__", None) != "inductor_entry_cpp":
        return None
    return getattr(getattr(entry, "__self__", None), "__file__", None)


def _record_wrapper(program) -> None:
    if getattr(program, "cpp_wrapper", False):
        metrics.record("cpp_wrapper_programs")
        if program._launch.calls_wrapper_directly:
            metrics.record("direct_cpp_programs")


def _report_legality(name: str, issues: dict) -> None:
    metrics.record_legality(name, issues, flagged=any(k in issues for k in legality.WARNED))
    legality.report(name, issues)


def _compile_program(gm, example_inputs, *, base_name: str, kind: str, cpp_wrapper: bool = False):
    started = time.perf_counter()
    name = f"neuron::program/{base_name}_{kind}"
    try:
        _check_runnable(gm, name)
        output_devices = _output_devices(gm)
        device = _program_device(example_inputs, output_devices)
        issues = legality.check(gm) if device is not None else {}
        if issues:
            _report_legality(name, issues)
        hits_before = counters["inductor"]["fxgraph_cache_hit"]
        inner = dict(is_backward=kind == "backward", is_inference=kind == "inference")
        store = program_cache.ProgramStore() if program_cache.enabled() else None
        if device is None:
            # A graph without neuron tensors is plain CPU code (random ops as below).
            program = _inductor_compile(gm, example_inputs, inner, store)
        else:
            fake_mode = torch._guards.detect_fake_mode(example_inputs)
            cpu_gm, cpu_inputs, wrappable = _graph_for_cpu(gm, example_inputs, fake_mode, device)
            inner["cpp_wrapper"] = cpp_wrapper and wrappable
            try:
                try:
                    compiled = _inductor_compile(cpu_gm, cpu_inputs, inner, store)
                except Exception as error:
                    if not inner["cpp_wrapper"]:
                        raise
                    # Inductor's C++ wrapper does not build every graph its Python wrapper
                    # builds (torch 2.13 emitted invalid C++ for an op returning integers): the
                    # program is compiled again, from a fresh copy, with the Python wrapper.
                    _log.info("%s: Inductor's C++ wrapper failed (%s: %s); compiling with the "
                              "Python wrapper", name, type(error).__name__, error)
                    inner["cpp_wrapper"] = False
                    store = program_cache.ProgramStore() if store is not None else None
                    cpu_gm, cpu_inputs, _ = _graph_for_cpu(gm, example_inputs, fake_mode, device)
                    compiled = _inductor_compile(cpu_gm, cpu_inputs, inner, store)
            except Exception as error:
                raise NeuronCompileError(
                    f"torch.compile(backend='neuron'): graph {name} could not be compiled: "
                    f"{type(error).__name__}: {error}") from error
            program = _Program(name, kind, device, compiled,
                               program_work.ProgramWork(gm, example_inputs),
                               output_devices, issues, store.stored_key if store else None,
                               cpp_wrapper=inner["cpp_wrapper"])
        metrics.record("programs")
        _record_wrapper(program)
        # With the program cache on, Inductor's only cache is the store: a hit is the store's.
        # Off, it is Inductor's own FX graph cache (TORCHINDUCTOR_CACHE_DIR).
        if counters["inductor"]["fxgraph_cache_hit"] > hits_before:
            metrics.record("cache_hits")
        else:
            metrics.record("cache_misses")
            metrics.record("compiles")
        return program
    finally:
        if not getattr(_inside_backend, "active", False):
            metrics.record("compile_seconds", time.perf_counter() - started)


def _inductor_compile(gm, example_inputs, inner: dict, store):
    """Inductor's compile of one program, served from / stored into the program cache (`store`,
    program_cache.py) when it is on."""
    from torch._inductor.compile_fx import compile_fx_inner

    # Random ops run as ATen's CPU ops inside the program (drawing from the CPU generator, which
    # torch.manual_seed seeds too): Inductor's own random lowering needs its joint-graph seed
    # pass, which this pipeline does not run.
    # corrected_codegen: Inductor's C++ code generation with our corrections (inductor_fixes.py).
    # A C++ wrapper (inner["cpp_wrapper"]) is built apart from the kernels: one translation unit
    # for both compiled on one core, which the kernels alone are not (cold compile of the tiny
    # Llama's training step 1.18x Inductor's, against 1.04x built apart, the steps as fast).
    with torch._inductor.config.patch(fallback_random=True, cpp_wrapper_build_separate=True), \
            inductor_fixes.corrected_codegen():
        if store is None:
            return compile_fx_inner(gm, example_inputs, **inner)
        compiled = None
        try:
            with program_cache.serving(store):
                compiled = compile_fx_inner(gm, example_inputs, **inner)
        finally:
            store.finish(compiled)
        return compiled


@functools.lru_cache(None)
def neuron_decompositions() -> dict:
    """The decomposition table AOTAutograd applies before a graph becomes a program: Inductor's
    (the programs are compiled by Inductor, which lowers what remains)."""
    from torch._inductor.decomposition import select_decomp_table

    # The table for random ops run as ATen ops (fallback_random, as the programs are compiled),
    # less what random_ops.py keeps whole so programs can draw from the neuron generator. Each
    # decomposition marks its parts as the call they stand for, so the program's work counts the
    # launches eager makes for that call (program_work.py).
    with torch._inductor.config.patch(fallback_random=True):
        table = dict(select_decomp_table())
    for op in random_ops.KEPT_WHOLE:
        table.pop(op, None)
    for op, decomposition in table.items():
        if isinstance(op, torch._ops.OpOverload):
            table[op] = program_work.marking(op, decomposition)
    return table


def _partition(joint_gm, joint_inputs, **kwargs):
    """Inductor's partitioner: its joint-graph passes (pattern rewrites such as attention
    fusion, no-op removal, constant folding), then the min-cut partition. Random ops stay ATen
    ops (fallback_random, as in the programs)."""
    from torch._inductor.compile_fx import partition_fn

    # What the passes add inside a decomposed call belongs to that call (program_work).
    program_work.note_traced(joint_gm)
    with torch._inductor.config.patch(fallback_random=True):
        return partition_fn(joint_gm, joint_inputs, **kwargs)


@contextlib.contextmanager
def _loading_for(base_name: str):
    previous = getattr(_loading, "base_name", None)
    _loading.base_name = base_name
    try:
        yield
    finally:
        _loading.base_name = previous


def _programs_compiled() -> int:
    return metrics.get_dynamo_metrics()["programs"]


def _timed_compile(compile_for, inputs, what: str):
    """AOTAutograd and the programs it builds now, timed as one (compile_seconds), announced
    while it runs if it takes a while (progress.py)."""
    started = time.perf_counter()
    _inside_backend.active = True
    try:
        with progress.CompileNotice(what, _programs_compiled):
            return compile_for(inputs)
    finally:
        _inside_backend.active = False
        metrics.record("compile_seconds", time.perf_counter() - started)


def _note_recompile() -> None:
    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is None or not compile_id.frame_compile_id:
        return
    reason = None
    try:
        from torch._dynamo.utils import get_metrics_context

        reason = get_metrics_context()._metrics.get("recompile_reason")
    except Exception:  # the metrics context is private API; the count stands without a reason
        reason = None
    metrics.record_recompile(reason or "unknown")


def _check_cpu_inputs(gm: torch.fx.GraphModule, example_inputs) -> None:
    """TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1: CPU tensors may not enter a graph that works
    on neuron (TorchNeuron raises instead of copying them to the device). By default they enter
    the program and are copied where the graph moves them, as TorchNeuron's automatic copy.
    0-dim CPU tensors are scalars, accepted on any device, as in eager."""
    if not _env.switch(_NO_AUTOCOPY_ENV):
        return
    uses_neuron = any(isinstance(x, torch.Tensor) and _is_neuron(x.device) for x in example_inputs)
    uses_neuron = uses_neuron or any(
        _is_neuron(arg) for node in gm.graph.nodes
        for arg in (*node.args, *node.kwargs.values()))
    if not uses_neuron:
        return
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() > 0:
            name = placeholders[i].name if i < len(placeholders) else f"#{i}"
            raise NeuronCompileError(
                f"torch.compile(backend='neuron'): input {name} is a CPU tensor "
                f"(shape {tuple(x.shape)}, {x.dtype}) and {_NO_AUTOCOPY_ENV}=1 forbids copying "
                f"CPU inputs into a compiled neuron graph. Move it to neuron before the call "
                f"(.to('neuron')), or unset {_NO_AUTOCOPY_ENV} to let the program copy it.")


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """The ``neuron`` backend of ``torch.compile``."""
    options = dict(options or {})
    if mode not in (None, "default"):
        warnings.warn(
            f"torch.compile(backend='neuron'): mode={mode!r} is not supported; compiling with "
            f"the default mode.", stacklevel=2)
    unknown = set(options) - _KNOWN_OPTIONS
    if unknown:
        warnings.warn(
            f"torch.compile(backend='neuron'): options {sorted(unknown)} are ignored; the backend "
            f"reads {sorted(_KNOWN_OPTIONS)}.", stacklevel=2)
    strict = _static_shapes(options)
    cpp_wrapper = _cpp_wrapper(options)
    if strict and not torch._dynamo.config.assume_static_by_default:
        raise NeuronCompileError(
            f"torch.compile(backend='neuron'): dynamic=True is not supported with static shapes "
            f"({_STATIC_ENV}=1 or options={{'static_shapes': True}}), as on TorchNeuron. Leave "
            f"`dynamic` unset or pass dynamic=False, or turn static shapes off to compile one "
            f"symbolic program for all shapes.")
    _check_cpu_inputs(gm, example_inputs)
    metrics.record("graphs")
    _note_recompile()
    graph_id = next(_graph_ids)
    base_name = f"{options['model_name']}_{graph_id}" if options.get("model_name") else (
        f"graph{graph_id}")
    ops = sum(1 for node in gm.graph.nodes if node.op == "call_function")
    what = f"graph {graph_id} ({ops} ops, programs {base_name}_*)"

    compilers = {
        kind: functools.partial(_compile_program, base_name=base_name, kind=kind,
                                cpp_wrapper=cpp_wrapper)
        for kind in ("forward", "backward", "inference")
    }
    def compile_backward(bw_gm, bw_inputs):
        # What aot_autograd's own wrapper does (Dynamo must trace neither the compiler nor the
        # program), keeping the program's boxed calling convention, which that wrapper drops.
        # Compiled at the first backward() unless the program cache compiles it with the
        # forward: then announced on its own.
        lazy = not getattr(_inside_backend, "active", False)
        notice = progress.CompileNotice(f"the backward of {what}", _programs_compiled) if lazy \
            else contextlib.nullcontext()
        with notice:
            program = torch._dynamo.disable(
                compilers["backward"], reason="do not trace the neuron backward compiler"
            )(bw_gm, bw_inputs)
        wrapped = torch._dynamo.disable(program, reason="do not trace a neuron backward program")
        wrapped._boxed_call = getattr(program, "_boxed_call", False)
        return wrapped

    compile_backward._is_wrapped_bw_compiler = True
    # With the program cache on, AOTAutograd's result for the whole graph is cached too (a graph
    # entry, program_cache.GraphStore): AOTAutograd looks a graph up only for a compiler whose
    # output it can serialize, which programs are.
    # Keyed with the options and the effective shape mode (strict mode compiles per shape) and
    # wrapper language.
    graph_store = (program_cache.GraphStore({**options, "static_shapes": strict,
                                          "cpp_wrapper": cpp_wrapper})
                   if program_cache.enabled() else None)
    compile_forward = compilers["forward"]
    if graph_store is not None:
        compile_forward = SerializableAOTDispatchCompiler(OutputCode, compile_forward)
    compile_graph = aot_autograd(
        fw_compiler=compile_forward,
        bw_compiler=compile_backward,
        inference_compiler=compilers["inference"],
        decompositions=neuron_decompositions(),
        partition_fn=_partition,
        keep_inference_input_mutations=True,
    )

    def compile_for(inputs):
        # SDPA on neuron tensors stays the fused overrideable attention op, which programs run
        # with the CPU kernel attention.py registers (ATen's CPU flash attention, as eager).
        if graph_store is None:
            return compile_graph(gm, inputs)
        with program_cache.serving_graphs(graph_store), _loading_for(base_name):
            return compile_graph(gm, inputs)

    if strict and _is_symbolic(example_inputs):
        return _ProgramPerShape(compile_for, base_name)

    try:
        return _timed_compile(compile_for, example_inputs, what)
    except Exception as error:
        if not _fallback_allowed(options):
            raise
        metrics.record("fallback_graphs")
        warnings.warn(
            f"torch.compile(backend='neuron'): graph {base_name} runs eagerly ({_FALLBACK_ENV}=0 "
            f"or fallback_execution): {error}", stacklevel=2)
        return gm.forward

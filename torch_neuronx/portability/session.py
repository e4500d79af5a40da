"""Watching a run for what would differ on TorchNeuron 2.33.

Three sources, all attributed to the user's frame (frames.py):
- every ATen op on neuron tensors, seen by a TorchDispatchMode below autograd (the ops a
  PrivateUse1 backend receives): coverage, dtypes, memory format, shapes;
- the compile path: Dynamo's graph-break log and this backend's recompile / static-shape metrics
  (torch_neuronx.dynamo.metrics), wrapped while the session runs;
- transformers' ``from_pretrained``, wrapped to see weights loaded onto neuron by the threaded
  loader.
Modules not imported yet when the session starts are hooked when they are imported.
"""

import functools
import importlib.abc
import re
import sys
import threading

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode

from torch_neuronx import _env
from torch_neuronx.portability import coverage, fixes, frames
from torch_neuronx.portability.report import (
    CATEGORIES,
    IGNORED,
    INFO,
    WARNING,
    Finding,
    PortabilityReport,
)

STRICT_ENV = "TORCH_NEURONX_PORTABILITY_STRICT"
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1
# A place whose op met new shapes in this many of its executions is "dynamic": 2 is common and
# harmless (the last partial batch, an eval batch size); a third is a pattern.
DYNAMIC_SHAPES_THRESHOLD = 3
_COPY_OPS = ("aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize")
_CHANNELS_LAST = (torch.channels_last, torch.channels_last_3d)

IGNORE_ENV = "TORCH_NEURONX_PORTABILITY_IGNORE"

_active_lock = threading.Lock()
_active = None


def strict_from_env() -> bool:
    return _env.switch(STRICT_ENV)


def ignore_rules(rules=None) -> tuple:
    """Findings to accept: ``category`` or ``category:subject`` entries (``cpu_fallback``,
    ``cpu_fallback:aten::normal_``), from the argument or, when None, from
    TORCH_NEURONX_PORTABILITY_IGNORE (comma-separated). Unknown categories are an error."""
    if rules is None:
        rules = _env.words(IGNORE_ENV)
    if isinstance(rules, str):
        rules = rules.split(",")
    parsed = []
    for rule in rules:
        rule = rule.strip()
        if not rule:
            continue
        category, _, subject = rule.partition(":")
        if category not in CATEGORIES:
            raise ValueError(
                f"portability report: cannot ignore {rule!r}: {category!r} is not a category; "
                f"use one of {', '.join(CATEGORIES)}, optionally with ':<subject>' "
                f"(e.g. cpu_fallback:aten::normal_)")
        parsed.append((category, subject or None))
    return tuple(parsed)


def _channels_last_strided(tensor) -> bool:
    """Strides of channels_last (4-D) or channels_last_3d (5-D) that are not also contiguous
    (a size-1 channel or spatial extent makes both hold: nothing would differ then)."""
    if tensor.dim() not in (4, 5) or tensor.is_contiguous():
        return False
    return tensor.is_contiguous(memory_format=_CHANNELS_LAST[tensor.dim() - 4])


def _tensors(value, into: list) -> None:
    if isinstance(value, torch.Tensor):
        into.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                into.append(item)


@functools.lru_cache(None)
def _scalar_args(func) -> tuple:
    """(position, name) of the arguments typed ``Scalar``: values, not sizes or dims (a slice end
    of 2**63-1 is a sentinel, not a value)."""
    return tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                 if str(a.type) == "Scalar")


def _graph_break_reason(reason, exc) -> str:
    """Dynamo's graph-break type and its one-line explanation ("Data-dependent branching:
    Detected data-dependent branching (e.g. ...)"), else the reason's first line."""
    text = str(getattr(exc, "msg", None) or reason or "unknown")
    kind = getattr(exc, "gb_type", None)
    explanation = next((line.strip()[len("Explanation:"):].strip() for line in text.splitlines()
                        if line.strip().startswith("Explanation:")), None)
    if kind and explanation:
        return f"{kind}: {explanation}"[:400]
    return (kind or text.strip().splitlines()[0])[:400]


class _ImportHook(importlib.abc.MetaPathFinder):
    """Runs a callback on a module right after it is first imported."""

    def __init__(self, callbacks: dict):
        self.callbacks = callbacks

    def find_spec(self, name, path, target=None):
        callback = self.callbacks.get(name)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            self.callbacks.pop(name, None)
            callback(module)

        loader.exec_module = exec_then_hook
        return spec


class _OpObserver(TorchDispatchMode):
    """Sees every ATen op after autograd, as the backend receives it. Compiled regions are left
    to the compile path (``ignore_compile_internals``): Dynamo still compiles under this mode,
    and the ops inside a compiled program are TorchNeuron's compiler's business, not its eager
    coverage."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self, session):
        super().__init__()
        self.session = session
        self._composites = threading.local()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        session = self.session
        watched = session.before(func, args, kwargs)
        if watched is _COMPOSITE:
            running = self._composites.__dict__.setdefault("ops", set())
            if func in running:
                # A composite kernel that dispatches its own op again (detach does): that
                # inner call goes to the backend as usual.
                return func(*args, **kwargs)
            # TorchNeuron has no kernel of its own for this op and runs PyTorch's composite one,
            # whose parts then dispatch on their own: run that kernel with this mode on, so the
            # parts (e.g. randn's normal_) are checked one by one.
            running.add(func)
            try:
                key = (DispatchKey.CompositeExplicitAutograd
                       if coverage.classify(func.name()) == coverage.COMPOSITE
                       else DispatchKey.CompositeExplicitAutogradNonFunctional)
                with self:
                    return func._op_dk(key, *args, **kwargs)
            finally:
                running.discard(func)
        out = func(*args, **kwargs)
        if watched is not None:
            session.after(func, args, kwargs, out, watched)
        return out


_COMPOSITE = object()


class _ShapeSite:
    """The shapes one op saw at one place. One execution of a line may touch tensors of many
    shapes (model.to(device), an optimizer step over every parameter): that is a fixed set,
    compiled once. Shapes are dynamic when new ones keep coming in later executions."""

    __slots__ = ("site", "signatures", "growing_executions", "_execution", "_grew")

    def __init__(self, site):
        self.site = site
        self.signatures: set = set()
        self.growing_executions = 0
        self._execution = None
        self._grew = False

    def see(self, signature, execution) -> None:
        if execution != self._execution:
            self._execution, self._grew = execution, False
        if signature not in self.signatures:
            self.signatures.add(signature)
            if not self._grew:
                self._grew = True
                self.growing_executions += 1


class Session:
    """One portability check: install, run the user's code, collect, uninstall."""

    def __init__(self, strict: bool, ignore=()):
        self.strict = strict
        self.ignore = tuple(ignore)
        self._findings: dict = {}
        self._lock = threading.RLock()
        self._patches: list = []
        self._hook = None
        self._observer = None
        self.op_calls = 0
        self.ops: set = set()
        self.compile_units: set = set()
        self._shape_sites: dict = {}
        self._last_place = None
        self._execution = 0
        self._int64_calls = 0
        self._int64_first = None
        self._metrics_before = None
        self.report = None

    # -- findings ------------------------------------------------------------------------------

    def add(self, category, severity, subject, site, message_fix, **details) -> Finding:
        key = (category, subject, site.where)
        with self._lock:
            finding = self._findings.get(key)
            if finding is None:
                message, fix = message_fix
                finding = Finding(category, severity, subject, site, message, fix)
                self._findings[key] = finding
            finding.count += 1
            for name, value in details.items():
                finding.details.setdefault(name, set()).add(value)
        return finding

    # -- eager ops -----------------------------------------------------------------------------

    def before(self, func, args, kwargs):
        """None when the op does not touch neuron; _COMPOSITE when TorchNeuron would run PyTorch's
        composite kernel for it; else (neuron inputs, all tensor inputs, the op name TorchNeuron
        would receive), checked after the call."""
        inputs: list = []
        for value in args:
            _tensors(value, inputs)
        for value in kwargs.values():
            _tensors(value, inputs)
        neuron_in = [t for t in inputs if t.device.type == "neuron"]
        device = kwargs.get("device")
        factory = isinstance(device, (str, torch.device)) and torch.device(device).type == "neuron"
        if not neuron_in and not factory:
            # An op whose only neuron tensor is its output (a copy onto the device) is seen
            # after the call.
            if func.namespace == "aten" and func.name() in _COPY_OPS:
                return [], inputs, func.name()
            return None
        fake = sys.modules.get("torch._subclasses.fake_tensor")
        if fake is not None and any(isinstance(t, fake.FakeTensor) for t in neuron_in):
            return None  # shape propagation (fake tensors), not a run
        memory_format = kwargs.get("memory_format")
        if memory_format in _CHANNELS_LAST:
            # Before the call, so a call that raises is named too. This backend computes every
            # format; TorchNeuron raises on a channels-last request.
            self.add("channels_last", WARNING, f"memory_format={memory_format}",
                     frames.current_site(skip=2), fixes.CHANNELS_LAST, op=func.name())
        name = func.name()
        if func.namespace == "aten":
            # A structured op's out= form is what reaches TorchNeuron: check that one. (Running
            # PyTorch's default kernel here instead would also work, but it resizes out=
            # tensors with a warning on some ops.)
            name = coverage.reaching_torchneuron(func)
            if name is None:
                return _COMPOSITE
        return neuron_in, inputs, name

    def after(self, func, args, kwargs, out, watched) -> None:
        neuron_in, inputs, name = watched
        outputs: list = []
        _tensors(out, outputs)
        neuron_out = [t for t in outputs if t.device.type == "neuron"]
        if not neuron_in and not neuron_out:
            return
        self.op_calls += 1
        self.ops.add(name)
        node = torch._C._current_autograd_node()
        backward = node.name() if node is not None else None
        site = None

        def where():
            nonlocal site
            if site is None:
                site = frames.current_site(skip=2, with_modules=True)
            return site

        details = {"op": name}
        if backward:
            details["backward_of"] = backward

        if not func.is_view and kwargs.get("memory_format") not in _CHANNELS_LAST:
            made = [t for t in neuron_out if not any(t is i for i in inputs)]
            if any(_channels_last_strided(t) for t in made):
                # A new tensor with channels-last strides that nobody asked for by name: a
                # channels-last CPU tensor copied over, or an op preserving its input's format.
                # TorchNeuron keeps only contiguous tensors there (see fixes.CHANNELS_LAST_TENSOR).
                self.add("channels_last_tensor", INFO, "channels-last strides", where(),
                         fixes.CHANNELS_LAST_TENSOR, **details)

        if name.startswith("aten::") and coverage.classify(name) == coverage.CPU_FALLBACK:
            finding = self.add("cpu_fallback", WARNING, name, where(),
                               fixes.cpu_fallback(name, coverage.is_silent_fallback(name)),
                               **details)
            # What the fallback moves: its neuron inputs to the host, its results back.
            finding.host_bytes += sum(t.nbytes for t in neuron_in) + \
                sum(t.nbytes for t in neuron_out)

        dtypes = {t.dtype for t in neuron_in} | {t.dtype for t in neuron_out}
        if torch.float64 in dtypes:
            self.add("float64", WARNING, "torch.float64", where(), fixes.FLOAT64, **details)
        for dtype in dtypes:
            if dtype.is_complex:
                self.add("complex", WARNING, str(dtype), where(), fixes.COMPLEX, **details)
        if torch.int64 in dtypes:
            self._check_int64(func, name, args, kwargs, inputs, where, details)

        # TorchNeuron compiles each eager op per (shape, dtype): count the combinations, and
        # find the places whose shapes keep changing. Backward ops follow their forward's shapes
        # (and their site would be the backward() call), so only forward ops are placed.
        signature = (tuple((tuple(t.shape), t.dtype) for t in neuron_in),
                     tuple(tuple(t.shape) for t in neuron_out))
        self.compile_units.add((name, signature))
        if backward is None and not func.is_view and not coverage.is_host_op(name):
            here = where()
            place = (here.where, here.modules)
            if place != self._last_place:
                # Another line ran ops in between: this is a new execution of this line.
                self._last_place = place
                self._execution += 1
            key = (name,) + place
            state = self._shape_sites.get(key)
            if state is None:
                state = self._shape_sites[key] = _ShapeSite(here)
            state.see(signature, self._execution)

    def _check_int64(self, func, name, args, kwargs, inputs, where, details) -> None:
        self._int64_calls += 1
        if self._int64_first is None:
            self._int64_first = where()
        # Values copied onto the device: the CPU source says exactly what would be truncated.
        if name in _COPY_OPS:
            for tensor in inputs:
                if tensor.device.type == "cpu" and tensor.dtype == torch.int64 and tensor.numel():
                    low, high = int(tensor.min()), int(tensor.max())
                    value = high if high > _INT32_MAX else low if low < _INT32_MIN else None
                    if value is not None:
                        self.add("int64_range", WARNING, "int64 > int32", where(),
                                 fixes.int64_range(value), **details)
        # Scalar operands (add(x, 2**40), full(..., 2**33), arange(2**32)).
        for position, arg_name in _scalar_args(func):
            value = args[position] if position < len(args) else kwargs.get(arg_name)
            if isinstance(value, int) and not isinstance(value, bool) and \
                    not _INT32_MIN <= value <= _INT32_MAX:
                self.add("int64_range", WARNING, "int64 > int32", where(),
                         fixes.int64_range(value), **details)

    # -- compile path --------------------------------------------------------------------------

    def on_recompile(self, reason) -> None:
        reason = str(reason or "guard failed").strip().splitlines()[0][:300]
        reason = re.sub(r"^\d+/\d+: ", "", reason)  # Dynamo's compile id
        self.add("recompile", WARNING, reason, frames.current_site(skip=2), fixes.recompile(reason))

    def on_static_shape_program(self) -> None:
        site = frames.current_site(skip=2, caller_of_user=True)
        self.add("recompile", WARNING, "static shapes: a new input shape", site,
                 fixes.static_shape_program(self._program_shapes()))

    @staticmethod
    def _program_shapes():
        # The compiled program's call frame holds its arguments (backend.py, _Program.__call__).
        frame = sys._getframe(3)
        while frame is not None:
            if frame.f_code.co_name == "__call__" and "args" in frame.f_code.co_varnames:
                args = frame.f_locals.get("args")
                if isinstance(args, list):
                    return [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            frame = frame.f_back
        return "(unknown)"

    def on_graph(self) -> None:
        import torch._dynamo

        if not torch._dynamo.config.assume_static_by_default:
            self.add("dynamic_compile", WARNING, "dynamic=True", frames.current_site(skip=2),
                     fixes.DYNAMIC_COMPILE)

    def on_graph_break(self, reason, user_stack, exc=None) -> None:
        reason = _graph_break_reason(reason, exc)
        site = frames.site_from_summary(user_stack) if user_stack else frames.current_site(2)
        self.add("graph_break", WARNING, reason, site, fixes.graph_break(reason))

    # -- transformers --------------------------------------------------------------------------

    def after_from_pretrained(self, model) -> None:
        # transformers' switch, read as transformers reads it (its ENV_VARS_TRUE_VALUES).
        if (_env.foreign("HF_DEACTIVATE_ASYNC_LOAD") or "").upper() in ("1", "ON", "YES", "TRUE"):
            return
        if isinstance(model, tuple):
            model = model[0]
        parameters = getattr(model, "parameters", None)
        if parameters is None:
            return
        if any(p.device.type == "neuron" for p in parameters()):
            self.add("async_weight_loading", WARNING, "HF_DEACTIVATE_ASYNC_LOAD unset",
                     frames.current_site(skip=2), fixes.ASYNC_LOAD)

    # -- install / uninstall -------------------------------------------------------------------

    def _patch(self, owner, attribute, replacement) -> None:
        # The owner's own entry (a classmethod object, not the bound method), or None when the
        # attribute is inherited: then the wrapper is deleted again instead of restored.
        original = vars(owner).get(attribute)
        self._patches.append((owner, attribute, original))
        setattr(owner, attribute, replacement)

    def _unpatch(self) -> None:
        for owner, attribute, original in reversed(self._patches):
            if original is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)
        self._patches.clear()

    def _hook_metrics(self, metrics) -> None:
        session = self
        if hasattr(metrics, "record_recompile"):
            record_recompile = metrics.record_recompile

            def recompile(reason, *args, **kwargs):
                session.on_recompile(reason)
                return record_recompile(reason, *args, **kwargs)

            self._patch(metrics, "record_recompile", recompile)
        if hasattr(metrics, "record_static_shape_recompile"):
            record_static = metrics.record_static_shape_recompile

            def static_shape(*args, **kwargs):
                session.on_static_shape_program()
                return record_static(*args, **kwargs)

            self._patch(metrics, "record_static_shape_recompile", static_shape)
        if hasattr(metrics, "record"):
            record = metrics.record

            def record_metric(key, *args, **kwargs):
                if key == "graphs":
                    session.on_graph()
                return record(key, *args, **kwargs)

            self._patch(metrics, "record", record_metric)

    def _hook_dynamo(self, symbolic_convert) -> None:
        translator = getattr(symbolic_convert, "InstructionTranslatorBase", None)
        original = getattr(translator, "log_graph_break", None)
        if original is None:
            return  # a PyTorch without this hook: graph breaks still count in the summary
        session = self

        def log_graph_break(tx, code_options, reason, exc, *args, **kwargs):
            if not getattr(exc, "logged", False):
                try:
                    stack = getattr(exc, "real_stack", None)
                    if stack is None:
                        stack = torch._guards.TracingContext.extract_stack()
                    session.on_graph_break(reason, stack, exc)
                except Exception:  # never break the user's compile over a report detail
                    session.on_graph_break(reason, None, exc)
            return original(tx, code_options, reason, exc, *args, **kwargs)

        self._patch(translator, "log_graph_break", log_graph_break)

    def _hook_transformers(self, modeling_utils) -> None:
        model_class = getattr(modeling_utils, "PreTrainedModel", None)
        original = model_class.__dict__.get("from_pretrained") if model_class else None
        if not isinstance(original, classmethod):
            return
        load = original.__func__
        session = self

        @functools.wraps(load)
        def from_pretrained(cls, *args, **kwargs):
            model = load(cls, *args, **kwargs)
            session.after_from_pretrained(model)
            return model

        self._patch(model_class, "from_pretrained", classmethod(from_pretrained))

    def _compile_metrics(self):
        if "torch._dynamo" not in sys.modules:
            return None
        from torch_neuronx.dynamo import metrics

        return metrics.get_dynamo_metrics()

    def start(self) -> None:
        global _active
        with _active_lock:
            if _active is not None:
                raise RuntimeError(
                    "torch_neuronx.portability_report() is already checking this process; "
                    "nest the code in the running check instead of starting a second one.")
            _active = self
        self._metrics_before = self._compile_metrics()
        hooks = {
            "torch_neuronx.dynamo.metrics": self._hook_metrics,
            "torch._dynamo.symbolic_convert": self._hook_dynamo,
            "transformers.modeling_utils": self._hook_transformers,
        }
        pending = {}
        for name, install in hooks.items():
            module = sys.modules.get(name)
            if module is not None:
                install(module)
            else:
                pending[name] = install
        self._hook = _ImportHook(pending)
        sys.meta_path.insert(0, self._hook)
        self._observer = _OpObserver(self)
        self._observer.__enter__()

    def stop(self) -> PortabilityReport:
        global _active
        try:
            if self._observer is not None:
                self._observer.__exit__(None, None, None)
        finally:
            if self._hook in sys.meta_path:
                sys.meta_path.remove(self._hook)
            self._unpatch()
            with _active_lock:
                _active = None
        self.report = self._build()
        return self.report

    def _build(self) -> PortabilityReport:
        # One finding per op and line (the sites of one line differ by the modules they went
        # through, e.g. the layers of a model), with the most shapes any of them met.
        dynamic: dict = {}
        for (name, where, _), state in self._shape_sites.items():
            if state.growing_executions >= DYNAMIC_SHAPES_THRESHOLD:
                best = dynamic.get((name, where))
                if best is None or len(state.signatures) > len(best.signatures):
                    dynamic[(name, where)] = state
        for (name, _), state in dynamic.items():
            shapes = len(state.signatures)
            finding = self.add("dynamic_shapes", WARNING, name, state.site,
                               fixes.dynamic_shapes(name, shapes))
            finding.count = shapes
        if self._int64_calls and not any(k[0] == "int64_range" for k in self._findings):
            finding = self.add("int64", INFO, "int64", self._int64_first, fixes.INT64_INFO)
            finding.count = self._int64_calls
        summary = {
            "eager_op_calls": self.op_calls,
            "eager_ops": len(self.ops),
            "eager_compile_units": len(self.compile_units),
            "coverage": coverage.source_summary(),
        }
        after = self._compile_metrics()
        if after is not None and after.get("graphs", 0) or self._metrics_before:
            before = self._metrics_before or {}
            keys = ("graphs", "programs", "recompiles", "torchneuron_programs",
                    "torchneuron_recompiles", "graph_breaks")
            # Deltas over the check (clamped: the code may reset the metrics itself).
            summary["compile"] = {k: max(0, (after or {}).get(k, 0) - before.get(k, 0))
                                  for k in keys}
        for finding in self._findings.values():
            if finding.severity == WARNING and any(
                    finding.category == category and subject in (None, finding.subject)
                    for category, subject in self.ignore):
                finding.severity = IGNORED
        if self.ignore:
            summary["ignored"] = [f"{c}:{s}" if s else c for c, s in self.ignore]
        return PortabilityReport(list(self._findings.values()), summary, self.strict)

"""``torch.compile`` without a backend, on neuron tensors: the neuron backend, as TorchNeuron does.

TorchNeuron's reference for ``torch.compile`` documents the backend as "'neuron': explicitly set,
or auto-selected when running on a Neuron device" (docs/compile.md). Without a backend,
``torch.compile`` uses Inductor, which has no code generation for a ``neuron`` device and failed
deep inside with ``KeyError: 'neuron'``. Here Inductor's entry point hands a graph that works on
neuron tensors to the neuron backend (itself Inductor's CPU code, run as neuron programs); a graph
on other devices goes to Inductor unchanged. ``backend="inductor"`` is what ``torch.compile``
resolves "no backend" to, so the two cannot be told apart and both take this path.

The same module watches ``generate()`` on a compiled module that lives on neuron: ``torch.compile
(model)`` compiles calls of the module itself, while ``compiled.generate(...)`` is the original
model's method calling the original, uncompiled model, so it runs eagerly. When such a call
launches no program, a warning says so and how to compile generation.

Both hooks are installed on PyTorch's classes at ``import torch_neuronx`` (nothing is imported
for it: Dynamo loads on the first ``torch.compile``) and change nothing for graphs and modules
off neuron.
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings

import torch

_log = logging.getLogger("torch_neuronx.compile")
_announced = threading.Event()


def _is_neuron(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "neuron"
    if isinstance(value, str):
        return value.split(":")[0] == "neuron"
    return False


def graph_uses_neuron(gm, example_inputs) -> bool:
    """Whether a Dynamo graph works on neuron: a neuron tensor among its inputs, or a device
    argument naming neuron (a factory, a .to("neuron"))."""
    if any(isinstance(x, torch.Tensor) and x.device.type == "neuron" for x in example_inputs):
        return True
    for node in getattr(getattr(gm, "graph", None), "nodes", ()):
        for arg in (*node.args, *node.kwargs.values()):
            if _is_neuron(arg) and not isinstance(arg, str):
                return True
        if node.op == "get_attr":  # a constant the graph holds
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part, None)
            if isinstance(value, torch.Tensor) and value.device.type == "neuron":
                return True
    return False


def _route(original_call):
    @functools.wraps(original_call)
    def __call__(self, model_, inputs_, *args, **kwargs):
        if not graph_uses_neuron(model_, inputs_):
            return original_call(self, model_, inputs_, *args, **kwargs)
        from torch_neuronx.dynamo.backend import neuron_backend

        if not _announced.is_set():
            _announced.set()
            ignored = f"; Inductor settings {sorted(self.config)} do not apply" if self.config else ""
            _log.info("torch.compile without a backend: graphs on neuron tensors compile with "
                      "backend='neuron' (TorchNeuron selects it on a Neuron device)%s", ignored)
        return neuron_backend(model_, inputs_)

    __call__._routes_neuron = True
    return __call__


def _register_device_interface(original_init):
    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        # Dynamo asks the device interface about neuron tensors while it traces: registered
        # before the first trace, as naming backend="neuron" registers it.
        from torch_neuronx.dynamo import device_interface

        device_interface.register()
        install_generate_check()

    __init__._routes_neuron = True
    return __init__


def install() -> None:
    """Routes Inductor's graphs on neuron tensors to the neuron backend."""
    wrapper = torch._TorchCompileInductorWrapper
    if getattr(wrapper.__call__, "_routes_neuron", False):
        return
    wrapper.__call__ = _route(wrapper.__call__)
    wrapper.__init__ = _register_device_interface(wrapper.__init__)


# --- generate() on a compiled module ----------------------------------------------------------

GENERATE_RAN_EAGERLY = (
    "{name}.generate(...) ran eagerly: it launched no compiled neuron program. torch.compile(model) "
    "compiles calls of the module itself (compiled(input_ids, ...)); generate() is the original "
    "model's method and calls the original, uncompiled model. To compile generation on neuron, "
    "call model.generate(..., cache_implementation=\"static\"): transformers then compiles the "
    "decoding step with backend=\"neuron\" (or pass compile_config=CompileConfig(backend="
    "\"neuron\", ...)). docs/compile.md, \"Compiling generate()\".")


def _on_neuron(module: torch.nn.Module) -> bool:
    for tensor in module.parameters():
        return tensor.device.type == "neuron"
    for tensor in module.buffers():
        return tensor.device.type == "neuron"
    return False


def _watched(optimized, generate):
    @functools.wraps(generate)
    def watched_generate(*args, **kwargs):
        from torch_neuronx.dynamo import metrics

        before = metrics.get_dynamo_metrics()["program_launches"]
        result = generate(*args, **kwargs)
        if metrics.get_dynamo_metrics()["program_launches"] == before:
            if not optimized.__dict__.get("_neuron_generate_warned"):
                optimized.__dict__["_neuron_generate_warned"] = True
                warnings.warn(GENERATE_RAN_EAGERLY.format(
                    name=type(optimized._orig_mod).__name__), stacklevel=2)
        return result

    return watched_generate


def install_generate_check() -> None:
    from torch._dynamo.eval_frame import OptimizedModule

    original = OptimizedModule.__getattr__
    if getattr(original, "_watches_generate", False):
        return

    def __getattr__(self, name):
        value = original(self, name)
        if name == "generate" and callable(value) and _on_neuron(self._orig_mod):
            return _watched(self, value)
        return value

    __getattr__._watches_generate = True
    OptimizedModule.__getattr__ = __getattr__

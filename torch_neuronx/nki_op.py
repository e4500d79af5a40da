"""NKI kernels as PyTorch operators: ``nki_op`` (a ``torch.library`` custom op around a typed
wrapper that calls ``@nki.jit`` kernels) and ``wrap_nki`` (a kernel kept as one node of a
compiled graph).

Both run the kernel through the same interpreter wherever the op lands: on ``neuron`` tensors as
one launch of kind ``nki_kernel``; inside a ``torch.compile(backend="neuron")`` program, whose
CPU code calls ops with host views of the neuron tensors, on those views; under fake tensors
(tracing) the kernel is only specialised, which gives the outputs' shapes and dtypes.
"""

from __future__ import annotations

import ast
import itertools

import torch

import nki
from nki import _jit as _nki_jit
from nki import _nki
from torch_neuronx import _C


class _NeuronDevice:
    """The neuron device as the nki package sees it: kernels on neuron tensors launch on the
    tensor's simulated NeuronCore (torch_neuronx depends on nki, never the reverse)."""

    _TARGETS = {"v2": "trn1", "v3": "trn2", "v4": "trn3"}

    def target(self, index):
        import torch_neuronx

        return self._TARGETS[torch_neuronx.core_model(index)["neuroncore"]]

    def current_device(self):
        return torch.neuron.current_device()

    def launch(self, executable, index, memory, exchange=None):
        return _C._nki_launch(executable.capsule(), index, memory, exchange)

    def core_links(self, index):
        return _C._nki_core_links(index)


_nki_jit.register_device("neuron", _NeuronDevice())
_C._nki_set_dma_model_path(_nki_jit.DMA_MODEL_PATH)
# ATen's GEMM for the interpreter's matmuls on the host too (BLAS order and speed).
_nki.set_host_kernels(_C._nki_host_kernels())

_LIBRARY = torch.library.Library("torch_neuronx", "FRAGMENT")
_LIBRARY.define("nki_call(str kernel, str constants, Tensor[] tensors) -> Tensor[]")
_KERNELS = {}
_IDS = itertools.count()


def nki_op(name, *, mutates_args=(), device_types=None, schema=None):
    """Decorator: ``@nki_op("mylib::my_op", mutates_args={})`` on a type-annotated function that
    calls NKI kernels makes it the custom op ``torch.ops.mylib.my_op`` (schema inferred from the
    annotations). The function itself is the fake kernel too: under fake tensors the NKI kernels
    it calls only specialise and return empty outputs of the right shape. Add a backward with
    ``op.register_autograd(backward, setup_context=...)`` or ``torch.library.register_autograd``.
    """

    def decorate(fn):
        op = torch.library.custom_op(name, fn, mutates_args=mutates_args,
                                     device_types=device_types, schema=schema)
        op.register_fake(fn)
        return op

    return decorate


def _is_literal(value):
    if isinstance(value, (tuple, list)):
        return all(_is_literal(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _literal(value):
    """The constant as Python source that ast.literal_eval reads back (the op's str argument).
    Plain repr, no round trip here: this runs while Dynamo traces."""
    if not _is_literal(value):
        raise ValueError
    return repr(value)


class _WrappedKernel:
    def __init__(self, kernel):
        self.kernel = nki.jit(kernel)
        self.key = f"{self.kernel.__name__}#{next(_IDS)}"
        _KERNELS[self.key] = self.kernel
        self.__name__ = self.kernel.__name__
        self.__doc__ = self.kernel.__doc__

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self._call(grid, args, kwargs)

    def __call__(self, *args, **kwargs):
        return self._call((1,), args, kwargs)

    def _call(self, grid, args, kwargs):
        if not torch.compiler.is_compiling():
            return self.kernel[grid](*args, **kwargs)
        if kwargs:
            raise TypeError(f"wrap_nki({self.__name__}): pass arguments positionally inside "
                            "compiled code")
        tensors, template = [], []
        for a in args:
            if isinstance(a, torch.Tensor):
                template.append(("T", len(tensors)))
                tensors.append(a)
            else:
                template.append(("C", a))
        try:
            constants = _literal((tuple(grid), tuple(template)))
        except (ValueError, SyntaxError):
            raise TypeError(f"wrap_nki({self.__name__}): non-tensor arguments must be Python "
                            "literals (numbers, strings, tuples) inside compiled code") from None
        outs = torch.ops.torch_neuronx.nki_call(self.key, constants, tensors)
        return _restore(self.kernel, outs)


def _restore(kernel, outs):
    spec = getattr(kernel, "_last_structure", ("one",))
    if spec[0] == "one":
        return outs[0]
    if spec[0] == "none":
        return None
    return tuple(outs) if spec[0] == "tuple" else list(outs)


def _invoke(key, constants, tensors):
    kernel = _KERNELS.get(key)
    if kernel is None:
        raise RuntimeError(f"torch_neuronx::nki_call: no kernel registered as {key!r} in this "
                           "process (wrap_nki must run before the compiled code)")
    grid, template = ast.literal_eval(constants)
    args = [tensors[v] if kind == "T" else v for kind, v in template]
    spec = kernel.specialize(args, {}, tuple(grid))
    if spec.mutated:
        raise RuntimeError(f"wrap_nki({kernel.__name__}) writes its inputs "
                           f"{spec.mutated}; use torch_neuronx.nki_op with mutates_args for "
                           "kernels that modify their arguments")
    if any(kind == "input" for _, _, (kind, _) in spec.outputs):
        raise RuntimeError(f"wrap_nki({kernel.__name__}) returns one of its inputs; return fresh "
                           "tensors")
    kernel._last_structure = spec.structure
    out = kernel.run(args, {}, tuple(grid))
    if out is None:
        return []
    return [out] if isinstance(out, torch.Tensor) else list(out)


@torch.library.impl(_LIBRARY, "nki_call", "CompositeExplicitAutograd")
def _nki_call(kernel, constants, tensors):
    return _invoke(kernel, constants, tensors)


@torch.library.register_fake("torch_neuronx::nki_call")
def _nki_call_fake(kernel, constants, tensors):
    return _invoke(kernel, constants, tensors)


def wrap_nki(kernel):
    """``wrap_nki(kernel)``: the kernel as a callable that, inside ``torch.compile``, becomes ONE
    node of the graph (the op ``torch_neuronx::nki_call``) instead of being traced into; outside
    compiled code it simply calls the kernel. ``wrapped[grid](...)`` launches a grid."""
    return _WrappedKernel(kernel)

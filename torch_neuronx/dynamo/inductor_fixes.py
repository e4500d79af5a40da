"""Corrections to Inductor's C++ code generation that the neuron programs compile under.

Programs are compiled by Inductor's CPU C++ backend (backend.py). Where that backend emits wrong
code for a graph, a program would compute wrong values, so the correction is ours to make while
our programs compile; the context manager scopes each one to those compiles and leaves Inductor as
it is for everything else in the process.

The one correction today: an accumulating store (`index_put(..., accumulate=True)`, the backward
of advanced indexing such as `x[..., [-2], :]`) in a kernel whose loops Inductor tiles in two
dimensions, compiled for more than one thread. torch 2.13's tile-2D kernel adds the inner loop's
offset to the store's index and then hands it to the vector kernel's atomic path, which builds the
index again through the tile-2D index expression and so adds the offset a second time: the
scatter lands on the wrong elements (and may write past the buffer). Falcon's multi-query
attention backward hits it (key and value are split off the fused projection with list indices):
its gradients came out 1.6% off, on Inductor CPU alike. With one thread the same store takes the
plain path and is right. Upstream tracks it as pytorch/pytorch#191837.
"""
from __future__ import annotations

import contextlib
import threading

_lock = threading.RLock()


def _takes_atomic_vector_path(kernel) -> bool:
    """Whether CppVecKernel.store's accumulating store goes through its atomic path, the one that
    rebuilds the index itself (otherwise it stores at the index it is given)."""
    from torch._inductor import config

    return bool(config.cpp.dynamic_threads) or kernel.num_threads != 1


def _make_tile2d_store(original):
    from torch._inductor.codegen.cpp import CppVecKernel

    def store(self, name, index, value, mode=None):
        if (mode == "atomic_add" and _takes_atomic_vector_path(self)
                and not self.need_vec_transpose(self.rename_indexing(index))):
            # The atomic path offsets the index itself (through the tile-2D index expression):
            # give it the index as the graph has it, not one already offset.
            return CppVecKernel.store(self, name, index, value, mode)
        return original(self, name, index, value, mode)

    store.__wrapped__ = original
    return store


@contextlib.contextmanager
def corrected_codegen():
    """Inductor's C++ code generation with our corrections, for the duration of one compile."""
    from torch._inductor.codegen.cpp import CppTile2DKernel

    with _lock:
        original = CppTile2DKernel.__dict__["store"]
        if hasattr(original, "__wrapped__"):  # nested: already corrected
            yield
            return
        CppTile2DKernel.store = _make_tile2d_store(original)
        try:
            yield
        finally:
            CppTile2DKernel.store = original

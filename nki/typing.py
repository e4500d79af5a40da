"""``nki.typing``: annotations for kernel parameters.

    import nki.typing as nt

    @nki.jit
    def kernel(x: nt.tensor[128, 512], y: nt.tensor):
        ...

``nt.tensor`` marks a tensor parameter; ``nt.tensor[shape]`` (and ``nt.tensor[shape, dtype]``)
also states its shape (and dtype). ``nki.jit`` checks stated shapes and dtypes when a kernel
specialises and names the parameter that differs.
"""

from __future__ import annotations

from nki import _core


class TensorType:
    """The annotation ``tensor[...]``: a tensor parameter with a stated shape and dtype (None for
    either: any)."""

    def __init__(self, shape=None, dtype=None):
        self.shape = tuple(int(s) for s in shape) if shape is not None else None
        self.dtype = _core.as_dtype(dtype) if dtype is not None else None

    def __repr__(self):
        parts = [str(list(self.shape)) if self.shape is not None else "..."]
        if self.dtype is not None:
            parts.append(self.dtype.name)
        return f"nki.typing.tensor[{', '.join(parts)}]"

    def check(self, parameter, value, kernel):
        """Raises NkiError when `value` (an array or tensor) differs from the annotation."""
        shape = tuple(getattr(value, "shape", ()))
        if self.shape is not None and shape != self.shape:
            raise _core.NkiError(f"kernel '{kernel}': parameter '{parameter}' is annotated "
                                 f"{self!r} but got shape {shape}")
        if self.dtype is not None and _core.as_dtype(value.dtype) != self.dtype:
            raise _core.NkiError(f"kernel '{kernel}': parameter '{parameter}' is annotated "
                                 f"{self!r} but got dtype {_core.as_dtype(value.dtype)}")


class _TensorAnnotation(TensorType):
    """``tensor`` itself (any shape) and ``tensor[...]``."""

    def __getitem__(self, item):
        items = item if isinstance(item, tuple) else (item,)
        dtype = None
        if items and not isinstance(items[-1], int) and not isinstance(items[-1], (tuple, list)):
            dtype, items = items[-1], items[:-1]
        if len(items) == 1 and isinstance(items[0], (tuple, list)):
            items = tuple(items[0])
        return TensorType(items, dtype)


tensor = _TensorAnnotation()
# The legacy API's annotation of a tensor the kernel writes (an input it mutates): a tensor.
mutable_tensor = _TensorAnnotation()

__all__ = ["TensorType", "mutable_tensor", "tensor"]

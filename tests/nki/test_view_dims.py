"""Views of many dims: NKI documents no limit on a tensor's rank (AWS's library kernels take
6-dim views of HBM tensors); the interpreter takes up to 8 dims and stops past that with an
NkiError at the kernel's line, not a ValueError from the binding."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def _copy_through_sbuf(shape):
    @nki.jit
    def k(a):
        out = nl.ndarray(shape, nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray(shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    return k


@pytest.mark.parametrize("ndim", [6, 8])
def test_views_up_to_eight_dims_run(ndim):
    shape = (2,) * (ndim - 1) + (3,)
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(_copy_through_sbuf(shape)(a), a)


def test_nine_dims_is_an_nki_error_at_the_line():
    shape = (2,) * 9
    a = np.zeros(shape, np.float32)
    with pytest.raises(nki.NkiError, match=r"test_view_dims.py:\d+: a view of 9 dims.*at most 8"):
        _copy_through_sbuf(shape)(a)

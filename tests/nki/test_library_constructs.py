"""Constructs AWS's NKI library uses that its test runs found missing here: a configuration
object (an ``@dataclass`` ``nl.NKIObject``, unhashable) passed to a kernel as a constant
(attention_tkg's AttnTKGConfig), and ``nisa.iota`` into a column block of a wider tile
(gen_mask_tkg's block-KV mask)."""

from dataclasses import dataclass

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@dataclass
class _Config(nl.NKIObject):
    scale: float = 1.0
    rows: int = 0


@nki.jit
def _scaled(x, cfg):
    out = nl.ndarray((cfg.rows, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((cfg.rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[0:cfg.rows, :])
    nisa.tensor_scalar(t, t, nl.multiply, cfg.scale)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_dataclass_configuration_is_a_kernel_constant():
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    before = len(_scaled._cache)
    np.testing.assert_array_equal(nki.simulate(_scaled)(x, _Config(2.0, 8)), 2 * x)
    # An equal configuration reuses the specialisation; another one specialises anew.
    np.testing.assert_array_equal(nki.simulate(_scaled)(x, _Config(2.0, 8)), 2 * x)
    assert len(_scaled._cache) == before + 1
    np.testing.assert_array_equal(nki.simulate(_scaled)(x, _Config(3.0, 4)), 3 * x[:4])
    assert len(_scaled._cache) == before + 2
    # A configuration that holds an array is not a constant.
    with pytest.raises(nki.NkiError, match="neither an array nor a hashable constant"):
        nki.simulate(_scaled)(x, _Config(np.ones(2), 8))


@nki.jit
def _iota_blocks(x):
    p, f = x.shape
    out = nl.ndarray((p, f), nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((p, f), nl.int32, buffer=nl.sbuf)
    half = f // 2
    for block in range(2):
        nisa.iota(dst=t[:, nl.ds(block * half, half)], pattern=[[1, half]],
                  offset=1000 * block, channel_multiplier=half)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_iota_into_column_blocks_of_a_wider_tile():
    p, f = 128, 16
    out = nki.simulate(_iota_blocks)(np.zeros((p, f), np.float32))
    part = np.arange(p)[:, None] * (f // 2)
    col = np.arange(f // 2)[None, :]
    want = np.concatenate([part + col, 1000 + part + col], axis=1)
    np.testing.assert_array_equal(out, want)


@nki.jit
def _transpose4(src):
    a, b, c, d = src.shape
    out = nl.ndarray((d, b, c, a), src.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((d, b, c, a), src.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=src)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("middle", [(1, 3), (2, 2)])
def test_dma_transpose_of_4d_keeps_the_middle_dims_in_order(middle):
    # AWS's default for a 4-D source is [3, 1, 2, 0] (qkv_cte loads its input so); with equal
    # middle dims a reversal would have the same shape and other values.
    src = np.arange(16 * middle[0] * middle[1] * 8, dtype=np.float32).reshape(16, *middle, 8)
    out = nki.simulate(_transpose4)(src)
    np.testing.assert_array_equal(out, src.transpose(3, 1, 2, 0))


@dataclass
class _Section(nl.NKIObject):
    index = None  # unannotated: @dataclass makes no field of it, NKI takes it by keyword
    offset = 0
    width: int = 4


@nki.jit
def _section_copy(x):
    s = _Section(index=1, offset=x.shape[1] // 2)
    out = nl.ndarray((x.shape[0], s.width), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((x.shape[0], s.width), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[:, s.offset:s.offset + s.width])
    nisa.tensor_scalar(t, t, nl.add, float(s.index))
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_dataclass_object_takes_its_unannotated_class_attributes_by_keyword():
    x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(nki.simulate(_section_copy)(x), x[:, 4:8] + 1)
    s = _Section(index=3)
    assert (s.index, s.offset, s.width) == (3, 0, 4)
    assert _Section(width=2).width == 2  # the dataclass's own fields as before
    with pytest.raises(TypeError):
        _Section(nonexistent=1)  # neither a field nor a class attribute: the dataclass refuses


@dataclass
class _Sizes(nl.NKIObject):
    rows: int
    cols: int


def test_a_dataclass_object_built_without_a_field_leaves_it_unset():
    # AWS's mlp_tkg builds its @dataclass dimension sizes without remainderIFused: the object
    # builds, and reading the field it was not given is an error, not a guess.
    sizes = _Sizes(rows=4)
    assert sizes.rows == 4
    with pytest.raises(AttributeError):
        sizes.cols
    assert _Sizes(1, 2) == _Sizes(rows=1, cols=2) != _Sizes(1, 3)


@dataclass
class _Params(nl.NKIObject):
    rows: int
    length: int

    def __init__(self, shape):  # its own constructor sets the fields (AWS's MLPParameters)
        self.rows, self.length = shape


def test_a_dataclass_object_with_its_own_constructor_runs_it():
    p = _Params((3, 5))
    assert (p.rows, p.length) == (3, 5)


def test_nl_range_is_refused_with_what_the_published_releases_define():
    # No published NKI release defines nl.range (AWS's library calls it): a named refusal.
    with pytest.raises(AttributeError, match="not a name of any published NKI release"):
        nl.range(4)
    assert not hasattr(nl, "range")

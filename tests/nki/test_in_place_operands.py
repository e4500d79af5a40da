"""Two-step elementwise instructions whose later operand is their destination itself: the
accumulation ``acc = data * s + acc`` (scalar_tensor_tensor with dst=operand1, as AWS's
attention backward accumulates dQ) and an activation whose bias or scale is its destination.
The streamed path writes FP32 results straight into the destination's memory; the first step
must not overwrite the operand the second reads (it doubled dQ: (data * s) + (data * s))."""

import numpy as np
import pytest
import torch

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def _accumulate(data, acc0, scale, times):
    out = nl.ndarray(acc0.shape, acc0.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray(data.shape, nl.float32, buffer=nl.sbuf)
    ps = nl.ndarray(data.shape, nl.float32, buffer=nl.psum)
    acc = nl.ndarray(acc0.shape, acc0.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=data)
    nisa.tensor_copy(ps, d)  # data in PSUM, as a matmul result
    nisa.dma_copy(dst=acc, src=acc0)
    for _ in range(times):
        nisa.scalar_tensor_tensor(dst=acc, data=ps, op0=nl.multiply, operand0=scale, op1=nl.add,
                                  operand1=acc)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("free", [8, 512, 2048 + 3])  # one streamed chunk, and two
@pytest.mark.parametrize("acc_dtype", [torch.float32, torch.bfloat16])  # in place, and staged
def test_scalar_tensor_tensor_accumulates_into_its_own_operand(free, acc_dtype):
    g = torch.Generator().manual_seed(free)
    data = torch.randn(128, free, generator=g)
    acc0 = torch.randn(128, free, generator=g).to(acc_dtype)
    out = nki.simulate(_accumulate)(data, acc0, 0.125, 2)
    want = acc0.float()
    for _ in range(2):  # FP32 inside, rounded to the accumulator's format after each instruction
        want = (data * 0.125 + want).to(acc_dtype).float()
    torch.testing.assert_close(out.float(), want, rtol=0, atol=0)


@nki.jit
def _activation_into_bias(data, bias0):
    out = nl.ndarray(bias0.shape, nl.float32, buffer=nl.shared_hbm)
    d = nl.ndarray(data.shape, nl.float32, buffer=nl.sbuf)
    b = nl.ndarray(bias0.shape, nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=data)
    nisa.dma_copy(dst=b, src=bias0)
    nisa.activation(dst=b, op=nl.copy, data=d, bias=b, scale=b)  # b = d * b + b
    nisa.dma_copy(dst=out, src=b)
    return out


def test_activation_whose_bias_and_scale_are_its_destination():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((128, 1)).astype(np.float32)
    bias = rng.standard_normal((128, 1)).astype(np.float32)
    out = nki.simulate(_activation_into_bias)(data, bias)
    np.testing.assert_array_equal(out, data * bias + bias)

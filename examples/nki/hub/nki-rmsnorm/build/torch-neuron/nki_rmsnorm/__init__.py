"""nki-rmsnorm: an RMSNorm layer for the Hugging Face `kernels` package, written in NKI for the
`neuron` device (build variant `torch-neuron`). `kernelize(model, device="neuron")` swaps it into
modules decorated with `@use_kernel_forward_from_hub("RMSNorm")` (transformers' LlamaRMSNorm)."""

import torch

import nki
import nki.isa as nisa
import nki.language as nl

from . import layers

__all__ = ["layers", "rms_norm", "rms_norm_kernel"]


@nki.jit
def rms_norm_kernel(x, weight, eps):
    """weight * (x * rsqrt(mean(x^2, -1) + eps)).to(x.dtype) for x [T, H] (any T), weight [H], in
    the order transformers' LlamaRMSNorm computes it: the statistics and the normalisation in
    float32, a rounding to x's dtype, then the weight."""
    tokens, hidden = x.shape
    out_dtype = x.dtype if x.dtype == weight.dtype else nl.float32
    out = nl.ndarray((tokens, hidden), out_dtype, buffer=nl.shared_hbm)
    w = nl.ndarray((128, hidden), weight.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=weight.reshape(1, hidden).broadcast_to((128, hidden)))
    for start in range(0, tokens, 128):
        rows = min(128, tokens - start)
        t = nl.load(x[start:start + rows, :])
        squares = nl.ndarray((rows, hidden), nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((rows, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(squares, nl.square, t, reduce_op=nl.add, reduce_res=sum_sq)
        var_eps = nl.ndarray((rows, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(var_eps, sum_sq, nl.multiply, 1.0 / hidden, op1=nl.add, operand1=eps)
        inv = nl.ndarray((rows, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(inv, nl.rsqrt, var_eps)
        normed = nl.ndarray((rows, hidden), x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(normed, t, nl.multiply, inv)
        res = nl.ndarray((rows, hidden), out_dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(res, normed, w[:rows, :], nl.multiply)
        nl.store(out[start:start + rows, :], res)
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    shape = x.shape
    out = rms_norm_kernel(x.reshape(-1, shape[-1]).contiguous(), weight.contiguous(), float(eps))
    return out.reshape(shape)

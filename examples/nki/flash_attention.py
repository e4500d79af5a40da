"""Flash attention forward and backward as NKI kernels, checked against torch's
scaled_dot_product_attention (and its autograd), with modelled time and engine utilisation on a
simulated NeuronCore.

    python examples/nki/flash_attention.py [--seq 2048] [--head-dim 128] [--causal]

The kernel keeps K^T and V resident in SBUF and streams 128-query tiles: scores for 512 keys at a
time on the Tensor engine (PSUM, FP32), the online softmax (running max and sum) on the Vector and
Scalar engines, and P @ V as four 128-key matmuls accumulated in one PSUM tile.
"""

import argparse
import math

import nki
import nki.isa as nisa
import nki.language as nl

Q_TILE = 128  # queries per tile: the stationary free size limit
K_TILE = 512  # keys per score matmul: the moving free size limit (one PSUM bank of FP32)



def _load_transposed(dst, src):
    """dst = src.T from HBM: the DMA engines' transpose on NeuronCore-v3+ (2-byte data at 90% of
    the DMA rate); a strided read, one descriptor per element, only where there is none."""
    if nisa.get_nc_version() >= nisa.nc_version.gen3:
        nisa.dma_transpose(dst=dst, src=src)
    else:
        nisa.dma_copy(dst=dst, src=src.T)

@nki.jit
def flash_attention_fwd(q, k, v, causal=False):
    """softmax(q @ k.T / sqrt(D)) @ v for q, k, v of shape [S, D]: D <= 128, S a multiple of 512.
    Returns [S, D] in q's dtype."""
    seq, d = q.shape
    scale = 1.0 / math.sqrt(d)
    out = nl.ndarray((seq, d), q.dtype, buffer=nl.shared_hbm)

    # K^T ([D, S], contraction dim D on partitions) and V ([128 keys, S / 128, D]) stay in SBUF.
    k_t = nl.ndarray((d, seq), k.dtype, buffer=nl.sbuf)
    for j in range(seq // K_TILE):
        _load_transposed(k_t[:, j * K_TILE:(j + 1) * K_TILE], k[j * K_TILE:(j + 1) * K_TILE, :])
    v_sb = nl.ndarray((128, seq // 128, d), v.dtype, buffer=nl.sbuf)
    for c in range(seq // 128):
        nisa.dma_copy(dst=v_sb[:, c, :], src=v[c * 128:(c + 1) * 128, :])

    for i in range(seq // Q_TILE):
        q_t = nl.ndarray((d, Q_TILE), q.dtype, buffer=nl.sbuf)
        _load_transposed(q_t, q[i * Q_TILE:(i + 1) * Q_TILE, :])
        running_max = nl.full((Q_TILE, 1), -3.0e38, nl.float32)
        running_sum = nl.zeros((Q_TILE, 1), nl.float32)
        acc = nl.zeros((Q_TILE, d), nl.float32)
        last_key = (i + 1) * Q_TILE if causal else seq
        for j in range((last_key + K_TILE - 1) // K_TILE):
            scores = nl.ndarray((Q_TILE, K_TILE), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(scores, q_t, k_t[:, j * K_TILE:(j + 1) * K_TILE])
            if causal and (j + 1) * K_TILE > i * Q_TILE + 1:
                # Keys after the query: query index - key index < 0 -> -inf before the softmax.
                rel = nl.ndarray((Q_TILE, K_TILE), nl.float32, buffer=nl.sbuf)
                nisa.iota(rel, [[-1, K_TILE]], offset=i * Q_TILE - j * K_TILE, channel_multiplier=1)
                keep = nl.ndarray((Q_TILE, K_TILE), nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(keep, rel, nl.greater_equal, 0.0)
                masked = nl.ndarray((Q_TILE, K_TILE), nl.float32, buffer=nl.sbuf)
                nisa.select(masked, keep, scores, nl.full((Q_TILE, K_TILE), -3.0e38, nl.float32))
                scores = masked
            tile_max = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(tile_max, nl.max, scores, axis=1)
            new_max = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(new_max, tile_max, nl.multiply, scale, op1=nl.maximum,
                               operand1=running_max)
            neg_max = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(neg_max, new_max, nl.multiply, -1.0)
            # p = exp(scale * s - max) with its row sums from the same Scalar-engine instruction.
            p = nl.ndarray((Q_TILE, K_TILE), q.dtype, buffer=nl.sbuf)
            row_sum = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(p, nl.exp, scores, bias=neg_max, scale=scale, reduce_op=nl.add,
                            reduce_res=row_sum)
            alpha = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(alpha, nl.exp, running_max, bias=neg_max)  # exp(old max - new max)
            nisa.tensor_scalar(running_sum, running_sum, nl.multiply, alpha, op1=nl.add,
                               operand1=row_sum)
            pv = nl.ndarray((Q_TILE, d), nl.float32, buffer=nl.psum)
            for c in range(K_TILE // 128):
                p_t_psum = nl.ndarray((128, Q_TILE), q.dtype, buffer=nl.psum)
                nisa.nc_transpose(p_t_psum, p[:, c * 128:(c + 1) * 128])
                p_t = nl.ndarray((128, Q_TILE), q.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(p_t, p_t_psum)
                nisa.nc_matmul(pv, p_t, v_sb[:, j * (K_TILE // 128) + c, :])
            nisa.tensor_scalar(acc, acc, nl.multiply, alpha)
            nisa.tensor_tensor(acc, acc, pv, nl.add)
            nisa.tensor_copy(running_max, new_max)
        o_tile = nl.ndarray((Q_TILE, d), q.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(o_tile, acc, nl.divide, running_sum)
        nisa.dma_copy(dst=out[i * Q_TILE:(i + 1) * Q_TILE, :], src=o_tile)
    return out



@nki.jit
def flash_attention_bwd(q, k, v, o, d_o):
    """Gradients (dq, dk, dv) of o = softmax(q @ k.T / sqrt(D)) @ v (non-causal) for q, k, v, o,
    d_o of shape [S, D]: D <= 128, S a multiple of 512. Float32 results.

    Per 128-query tile: a first pass over the keys recomputes the row log-sum-exp (as the
    forward's online softmax does); the second pass, 128 keys at a time, recomputes P and
    accumulates dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o O)) / sqrt(D), dQ += dS K
    (in one PSUM tile across the keys), dK += dS^T Q. K, K^T, V^T and the dK / dV accumulators
    stay in SBUF."""
    seq, d = q.shape
    scale = 1.0 / math.sqrt(d)
    nk = seq // 128
    dq = nl.ndarray((seq, d), nl.float32, buffer=nl.shared_hbm)
    dk = nl.ndarray((seq, d), nl.float32, buffer=nl.shared_hbm)
    dv = nl.ndarray((seq, d), nl.float32, buffer=nl.shared_hbm)

    k_t = nl.ndarray((d, seq), k.dtype, buffer=nl.sbuf)
    v_t = nl.ndarray((d, seq), v.dtype, buffer=nl.sbuf)
    for j in range(seq // K_TILE):
        _load_transposed(k_t[:, j * K_TILE:(j + 1) * K_TILE], k[j * K_TILE:(j + 1) * K_TILE, :])
        _load_transposed(v_t[:, j * K_TILE:(j + 1) * K_TILE], v[j * K_TILE:(j + 1) * K_TILE, :])
    k_sb = nl.ndarray((128, nk, d), k.dtype, buffer=nl.sbuf)
    for c in range(nk):
        nisa.dma_copy(dst=k_sb[:, c, :], src=k[c * 128:(c + 1) * 128, :])
    dk_acc = nl.zeros((128, nk, d), nl.float32)
    dv_acc = nl.zeros((128, nk, d), nl.float32)

    for i in range(seq // Q_TILE):
        rows = slice(i * Q_TILE, (i + 1) * Q_TILE)
        q_t = nl.ndarray((d, Q_TILE), q.dtype, buffer=nl.sbuf)
        _load_transposed(q_t, q[rows, :])
        q_sb = nl.load(q[rows, :])
        do_sb = nl.load(d_o[rows, :])
        do_t = nl.ndarray((d, Q_TILE), d_o.dtype, buffer=nl.sbuf)
        _load_transposed(do_t, d_o[rows, :])
        o_sb = nl.load(o[rows, :])
        # D_i = rowsum(dO * O)
        prod = nl.ndarray((Q_TILE, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(prod, do_sb, o_sb, nl.multiply)
        delta = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(delta, nl.add, prod, axis=1)

        # Pass 1: the row log-sum-exp of scale * q k^T.
        running_max = nl.full((Q_TILE, 1), -3.0e38, nl.float32)
        running_sum = nl.zeros((Q_TILE, 1), nl.float32)
        for j in range(seq // K_TILE):
            scores = nl.ndarray((Q_TILE, K_TILE), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(scores, q_t, k_t[:, j * K_TILE:(j + 1) * K_TILE])
            tile_max = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(tile_max, nl.max, scores, axis=1)
            new_max = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(new_max, tile_max, nl.multiply, scale, op1=nl.maximum,
                               operand1=running_max)
            neg_max = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(neg_max, new_max, nl.multiply, -1.0)
            e = nl.ndarray((Q_TILE, K_TILE), nl.float32, buffer=nl.sbuf)
            row_sum = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(e, nl.exp, scores, bias=neg_max, scale=scale, reduce_op=nl.add,
                            reduce_res=row_sum)
            alpha = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
            nisa.activation(alpha, nl.exp, running_max, bias=neg_max)
            nisa.tensor_scalar(running_sum, running_sum, nl.multiply, alpha, op1=nl.add,
                               operand1=row_sum)
            nisa.tensor_copy(running_max, new_max)
        log_sum = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation(log_sum, nl.log, running_sum)
        neg_lse = nl.ndarray((Q_TILE, 1), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(neg_lse, log_sum, running_max, nl.add)
        nisa.tensor_scalar(neg_lse, neg_lse, nl.multiply, -1.0)

        # Pass 2: gradients, 128 keys at a time.
        dq_psum = nl.ndarray((Q_TILE, d), nl.float32, buffer=nl.psum)
        for j in range(nk):
            keys = slice(j * 128, (j + 1) * 128)
            scores = nl.ndarray((Q_TILE, 128), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(scores, q_t, k_t[:, keys])
            p32 = nl.ndarray((Q_TILE, 128), nl.float32, buffer=nl.sbuf)
            nisa.activation(p32, nl.exp, scores, bias=neg_lse, scale=scale)
            p = nl.ndarray((Q_TILE, 128), q.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(p, p32, engine=nisa.engine.scalar)
            # dV_j += P^T dO: contraction over the queries (P's partitions).
            dv_psum = nl.ndarray((128, d), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dv_psum, p, do_sb)
            nisa.tensor_tensor(dv_acc[:, j, :], dv_acc[:, j, :], dv_psum, nl.add)
            # dP = dO V^T: contraction over D.
            dp = nl.ndarray((Q_TILE, 128), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dp, do_t, v_t[:, keys])
            ds32 = nl.ndarray((Q_TILE, 128), nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(ds32, dp, nl.subtract, delta, op1=nl.multiply, operand1=scale)
            ds = nl.ndarray((Q_TILE, 128), q.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(ds, ds32, p32, nl.multiply)
            # dK_j += dS^T Q: contraction over the queries.
            dk_psum = nl.ndarray((128, d), nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dk_psum, ds, q_sb)
            nisa.tensor_tensor(dk_acc[:, j, :], dk_acc[:, j, :], dk_psum, nl.add)
            # dQ += dS K_j: contraction over the keys, so dS is transposed first.
            ds_t_psum = nl.ndarray((128, Q_TILE), q.dtype, buffer=nl.psum)
            nisa.nc_transpose(ds_t_psum, ds)
            ds_t = nl.ndarray((128, Q_TILE), q.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(ds_t, ds_t_psum)
            nisa.nc_matmul(dq_psum, ds_t, k_sb[:, j, :])
        dq_sb = nl.ndarray((Q_TILE, d), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dq_sb, dq_psum)
        nisa.dma_copy(dst=dq[rows, :], src=dq_sb)
    for c in range(nk):
        nisa.dma_copy(dst=dk[c * 128:(c + 1) * 128, :], src=dk_acc[:, c, :])
        nisa.dma_copy(dst=dv[c * 128:(c + 1) * 128, :], src=dv_acc[:, c, :])
    return dq, dk, dv


def main():
    import torch
    import torch.nn.functional as F

    import torch_neuronx  # noqa: F401

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    q, k, v = (torch.randn(args.seq, args.head_dim, dtype=torch.bfloat16) for _ in range(3))
    out = flash_attention_fwd(q.to("neuron"), k.to("neuron"), v.to("neuron"), args.causal).cpu()
    ref = F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None],
                                         is_causal=args.causal)[0]
    err = (out.float() - ref).abs().max().item()
    run = flash_attention_fwd.last_run
    print(f"flash attention fwd S={args.seq} D={args.head_dim} causal={args.causal}: "
          f"max |error| vs SDPA (fp32) {err:.2e}")
    print(f"  modelled {run.makespan_ns / 1e3:.1f} us, {run.tflops:.1f} TFLOP/s, MFU {run.mfu:.1%}")
    print("  utilisation " + ", ".join(f"{e} {u:.0%}" for e, u in run.utilization.items()))
    if args.causal:
        return
    # Backward against autograd through SDPA (fp32 on the same bf16 values).
    d_o = torch.randn(args.seq, args.head_dim, dtype=torch.bfloat16)
    leaves = [t.float()[None].requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*leaves).backward(d_o.float()[None])
    grads = flash_attention_bwd(*(t.to("neuron") for t in (q, k, v, out, d_o)))
    errs = [(g.cpu() - leaf.grad[0]).abs().max().item() for g, leaf in zip(grads, leaves)]
    run = flash_attention_bwd.last_run
    print(f"flash attention bwd: max |error| vs autograd of SDPA dq {errs[0]:.2e}, "
          f"dk {errs[1]:.2e}, dv {errs[2]:.2e}")
    print(f"  modelled {run.makespan_ns / 1e3:.1f} us, {run.tflops:.1f} TFLOP/s, MFU {run.mfu:.1%}")
    print("  utilisation " + ", ".join(f"{e} {u:.0%}" for e, u in run.utilization.items()))


if __name__ == "__main__":
    main()

"""Flash attention forward as an NKI kernel, checked against torch's scaled_dot_product_attention,
with its modelled time and engine utilisation on a simulated NeuronCore.

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
        nisa.dma_copy(dst=k_t[:, j * K_TILE:(j + 1) * K_TILE], src=k[j * K_TILE:(j + 1) * K_TILE, :].T)
    v_sb = nl.ndarray((128, seq // 128, d), v.dtype, buffer=nl.sbuf)
    for c in range(seq // 128):
        nisa.dma_copy(dst=v_sb[:, c, :], src=v[c * 128:(c + 1) * 128, :])

    for i in range(seq // Q_TILE):
        q_t = nl.ndarray((d, Q_TILE), q.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_t, src=q[i * Q_TILE:(i + 1) * Q_TILE, :].T)
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


if __name__ == "__main__":
    main()

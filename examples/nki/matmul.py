"""Tiled matmul as an NKI kernel, checked against torch, with its modelled TFLOP/s against the
NeuronCore's BF16 peak (torch_neuronx/data/neuron_cores.ini).

    python examples/nki/matmul.py [--m 1024] [--k 1024] [--n 1024]

Both operands are loaded into SBUF once (lhsT as [128, K/128, M], rhs as [128, K/128, N]); each
128 x 512 output tile accumulates K/128 matmuls in one PSUM bank, is copied to SBUF (alternating
the Vector and Scalar engines so the copies overlap) and stored.
"""

import argparse

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_kernel(lhs_t, rhs):
    """lhs_t [K, M] (the left operand transposed: contraction on partitions) @ rhs [K, N] ->
    [M, N] in float32. K, M multiples of 128, N a multiple of 512."""
    k_total, m_total = lhs_t.shape
    _, n_total = rhs.shape
    kt = k_total // 128
    out = nl.ndarray((m_total, n_total), nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, kt, m_total), lhs_t.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, kt, n_total), rhs.dtype, buffer=nl.sbuf)
    for k in range(kt):
        nisa.dma_copy(dst=a[:, k, :], src=lhs_t[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=b[:, k, :], src=rhs[k * 128:(k + 1) * 128, :])
    tile = 0
    for m in range(m_total // 128):
        for n in range(n_total // 512):
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for k in range(kt):
                nisa.nc_matmul(acc, a[:, k, m * 128:(m + 1) * 128], b[:, k, n * 512:(n + 1) * 512])
            res = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
            engine = nisa.engine.vector if tile % 2 == 0 else nisa.engine.scalar
            nisa.tensor_copy(res, acc, engine=engine)
            nisa.dma_copy(dst=out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], src=res)
            tile += 1
    return out


def main():
    import torch

    import torch_neuronx

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    args = parser.parse_args()
    torch.manual_seed(0)
    a = torch.randn(args.m, args.k, dtype=torch.bfloat16)
    b = torch.randn(args.k, args.n, dtype=torch.bfloat16)
    out = matmul_kernel(a.t().contiguous().to("neuron"), b.to("neuron")).cpu()
    ref = a.double() @ b.double()
    bound = (args.k + 1) * 2.0**-24 * (a.double().abs() @ b.double().abs())
    assert torch.all((out.double() - ref).abs() <= bound), "outside the FP32 accumulation bound"
    run = matmul_kernel.last_run
    peak = run.peak_flops_per_ns / 1e3
    print(f"matmul {args.m}x{args.k}x{args.n} bf16 -> fp32: within the FP32 accumulation bound")
    print(f"  modelled {run.makespan_ns / 1e3:.1f} us, {run.tflops:.1f} TFLOP/s of {peak:.1f} "
          f"(BF16 peak of one {torch_neuronx.core_model()['neuroncore']} core): MFU {run.mfu:.1%}")
    print("  utilisation " + ", ".join(f"{e} {u:.0%}" for e, u in run.utilization.items()))


if __name__ == "__main__":
    main()

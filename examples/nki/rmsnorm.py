"""RMSNorm as an NKI kernel (nl.rms_norm on 128-token tiles), checked against torch, with its
modelled time and engine utilisation.

    python examples/nki/rmsnorm.py [--tokens 2048] [--hidden 4096]
"""

import argparse

import nki
import nki.language as nl


@nki.jit
def rmsnorm_kernel(x, weight, eps=1e-6):
    """x [T, H] * rsqrt(mean(x^2, -1) + eps) * weight [H]; T a multiple of 128 (or below it)."""
    tokens, hidden = x.shape
    out = nl.ndarray((tokens, hidden), x.dtype, buffer=nl.shared_hbm)
    w = nl.load(weight.reshape(1, hidden))
    step = min(tokens, 128)
    for i in range(tokens // step):
        tile = nl.load(x[i * step:(i + 1) * step, :])
        nl.store(out[i * step:(i + 1) * step, :], nl.rms_norm(tile, w, axis=1, epsilon=eps))
    return out


def main():
    import torch

    import torch_neuronx  # noqa: F401

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=4096)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.tokens, args.hidden, dtype=torch.bfloat16)
    w = torch.randn(args.hidden, dtype=torch.bfloat16)
    out = rmsnorm_kernel(x.to("neuron"), w.to("neuron")).cpu()
    ref = torch.nn.functional.rms_norm(x.double(), (args.hidden,), w.double(), eps=1e-6)
    err = ((out.double() - ref).abs() / ref.abs().clamp_min(1e-30)).max().item()
    run = rmsnorm_kernel.last_run
    print(f"rmsnorm {args.tokens}x{args.hidden} bf16: max relative error {err:.2e}")
    print(f"  modelled {run.makespan_ns / 1e3:.1f} us, {x.numel() * 4 / run.makespan_ns:.1f} GB/s "
          "of HBM traffic")
    print("  utilisation " + ", ".join(f"{e} {u:.0%}" for e, u in run.utilization.items()))


if __name__ == "__main__":
    main()

"""Row softmax as an NKI kernel (nl.softmax on 128-row tiles), checked against torch, with its
modelled time and engine utilisation.

    python examples/nki/softmax.py [--rows 1024] [--cols 2048]
"""

import argparse

import nki
import nki.language as nl


@nki.jit
def softmax_kernel(x):
    """softmax over the last dim of x [R, C], R a multiple of 128 (or smaller than it)."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), x.dtype, buffer=nl.shared_hbm)
    step = min(rows, 128)
    for i in range(rows // step):
        tile = nl.load(x[i * step:(i + 1) * step, :])
        nl.store(out[i * step:(i + 1) * step, :], nl.softmax(tile, axis=1))
    return out


def main():
    import torch

    import torch_neuronx  # noqa: F401

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--cols", type=int, default=2048)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.rows, args.cols, dtype=torch.bfloat16)
    out = softmax_kernel(x.to("neuron")).cpu()
    ref = torch.softmax(x.double(), dim=1)
    err = ((out.double() - ref).abs() / ref).max().item()
    run = softmax_kernel.last_run
    print(f"softmax {args.rows}x{args.cols} bf16: max relative error {err:.2e} (bf16 unit roundoff "
          f"{2.0**-8:.2e})")
    print(f"  modelled {run.makespan_ns / 1e3:.1f} us, {x.numel() * 4 / run.makespan_ns:.1f} GB/s "
          "of HBM traffic")
    print("  utilisation " + ", ".join(f"{e} {u:.0%}" for e, u in run.utilization.items()))


if __name__ == "__main__":
    main()

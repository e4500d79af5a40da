"""A collective costs the same on the simulated clock as in the estimate: each rank runs real
all_reduce, all_gather and reduce_scatter calls of several sizes and compares its launch record's
modelled time, less the launch's fixed cost, with the estimate's price of the same collective on
the same instance (torch_neuronx.estimate's projection asks the same link model). Both must be
the one rule of csrc/runtime/LinkModel (CoreLinks::collective_ns) reached with the same traffic,
so the figures are equal to the last bits of a double, not close."""

import os

import torch
import torch.distributed as dist

import torch_neuronx
from torch_neuronx import _C
from torch_neuronx.estimate._project import data_paths

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEV = torch.device("neuron")


def one_record(run):
    torch_neuronx.clear_kernel_trace()
    run()
    records = [r for r in torch_neuronx.kernel_trace() if r["kind"] == "collective"]
    assert len(records) == 1, records
    return records[0]


def main():
    dist.init_process_group("neuron")
    topology = _C._topology()
    instance = topology["instance"]
    data, engines = data_paths()
    launch_ns = torch_neuronx.core_model()["kernel_launch_ns"]
    overs = set()
    # 1 KiB: the mesh; 4 MiB: recursive doubling-halving (where the group spans chips).
    for part in (256, 1 << 20):
        whole = part * WORLD  # float32 elements of the collective's whole buffer
        cases = {
            "all_reduce": lambda: dist.all_reduce(torch.ones(whole, device=DEV)),
            "all_gather": lambda: dist.all_gather_into_tensor(
                torch.empty(whole, device=DEV), torch.ones(part, device=DEV)),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(
                torch.empty(part, device=DEV), torch.ones(whole, device=DEV)),
        }
        for kind, run in cases.items():
            record = one_record(run)
            price = _C._estimate_collective(kind, float(whole * 4), WORLD, 1, instance, data, engines)
            assert price["ranks_per_instance"] == topology["logical_cores_on_instance"], (
                price, topology)
            clock_ns = record["sim_ns"] - launch_ns
            estimate_ns = price["link_s"] * 1e9
            # One formula in double precision on both sides; only the seconds <-> ns scaling of
            # the binding separates them.
            assert abs(clock_ns - estimate_ns) <= 1e-12 * estimate_ns, (
                kind, whole * 4, clock_ns, estimate_ns, price["over"])
            overs.add(price["over"])
    print(f"rank {RANK} prices agree over {sorted(overs)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

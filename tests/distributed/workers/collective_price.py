"""A collective costs the same on the simulated clock as in the estimate: each rank runs real
all_reduce, all_gather, reduce_scatter and all_to_all calls of several sizes and compares its
launch record's modelled time, less the launch's fixed cost, with the estimate's price of the same
collective on the same instance (torch_neuronx.estimate's projection asks the same link model).
Both must be the one rule of csrc/runtime/LinkModel (CoreLinks::collective_ns) reached with the
same traffic, so the figures are equal to the last bits of a double, not close.

PRICE_RANKS_PER_HOST (default: all on one host) puts the ranks on simulated hosts of that many
consecutive ranks (NRTSIM_HOST_ID), and the estimate prices the same group as one strided across
instances with that many members on each."""

import os

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
PER_HOST = int(os.environ.get("PRICE_RANKS_PER_HOST", WORLD))
if PER_HOST < WORLD:
    # Set before the process group reads them: the host this rank is on, and its place there.
    os.environ["NRTSIM_HOST_ID"] = f"price-host-{RANK // PER_HOST}"
    os.environ["LOCAL_RANK"] = os.environ["NEURON_RT_VISIBLE_CORES"] = str(RANK % PER_HOST)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torch_neuronx  # noqa: E402
from torch_neuronx import _C  # noqa: E402
from torch_neuronx.estimate._project import data_paths  # noqa: E402

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
    per_instance = topology["logical_cores_on_instance"]
    hosts = WORLD // PER_HOST
    # The estimate's group of WORLD ranks with PER_HOST on each instance: `stride` ranks apart.
    stride = 1 if hosts == 1 else per_instance // PER_HOST
    data, engines = data_paths()
    launch_ns = torch_neuronx.core_model()["kernel_launch_ns"]
    overs = set()
    # Across hosts, sizes below the mesh's limit (1 MB): there its steps do not depend on how
    # the members sit on chips (the estimate's strided members each on a chip of their own, the
    # process group's consecutive cores two to a chip). On one host: the mesh and recursive
    # doubling-halving.
    for part in (256, 1 << 20) if hosts == 1 else (256, 1 << 15):
        whole = part * WORLD  # float32 elements of the collective's whole buffer
        cases = {
            "all_reduce": lambda: dist.all_reduce(torch.ones(whole, device=DEV)),
            "all_gather": lambda: dist.all_gather_into_tensor(
                torch.empty(whole, device=DEV), torch.ones(part, device=DEV)),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(
                torch.empty(part, device=DEV), torch.ones(whole, device=DEV)),
            "all_to_all": lambda: dist.all_to_all_single(
                torch.empty(whole, device=DEV), torch.ones(whole, device=DEV)),
        }
        for kind, run in cases.items():
            record = one_record(run)
            price = _C._estimate_collective(kind, float(whole * 4), WORLD, stride, instance, data,
                                            engines)
            assert price["ranks_per_instance"] == per_instance, (price, topology)
            if hosts > 1:
                assert "EFA" in price["over"], (kind, price["over"])
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

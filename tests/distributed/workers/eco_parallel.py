"""Pipeline parallelism, distributed checkpoint resharding and activation checkpointing on the
neuron process group, each checked against a single-process CPU float32 run of the same tiny
Llama (examples/distributed/tiny_llama.py) on the same global batches.

argv[1]: scenarios, comma-separated, run in order in one process group: pp, dcp, ac;
argv[2] (dcp): a directory shared by the ranks. A failing scenario is reported and the others
still run; the exit status is non-zero if any failed."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "distributed"))
import tiny_llama as tl  # noqa: E402

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEV = torch.device("neuron")
GLOBAL_BATCH = 4
# fp32 everywhere: a distributed run differs from one process only by summation order (sharded
# contractions, averaged gradients, microbatch gradients accumulated): a few float32 roundings
# (~1e-7 relative) per op, grown through a few SGD/AdamW steps of 2 layers on O(0.1-1) values.
LOSS_RTOL, PARAM_ATOL = 1e-5, 1e-5


def reference(steps, optimizer, lr, batch=GLOBAL_BATCH):
    return tl.train_single_process(steps, optimizer, lr, batch)


full = tl.full_cpu


def compare_losses(got, want, what):
    assert len(got) == len(want), (got, want)
    for step, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= LOSS_RTOL * abs(b), f"{what}: step {step} loss {a} vs single process {b}"


def compare_params(state, ref_state, what, names=None):
    worst = 0.0
    for name in names or ref_state:
        got, want = full(state[name]), ref_state[name]
        diff = (got - want).abs().max().item()
        worst = max(worst, diff)
        assert diff <= PARAM_ATOL, f"{what}: {name} differs from single process by {diff} (atol {PARAM_ATOL})"
    return worst


# --- pipeline parallel -------------------------------------------------------------------------


class FirstStage(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.tok_embeddings, self.layer = model.tok_embeddings, model.layers[0]

    def forward(self, tokens):
        return self.layer(self.tok_embeddings(tokens))


class LastStage(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.layer, self.norm, self.output = model.layers[1], model.norm, model.output

    def forward(self, h):
        return self.output(self.norm(self.layer(h)))


# The stage parameter names in the whole model's state dict.
STAGE_NAMES = [
    {"tok_embeddings.": "tok_embeddings.", "layer.": "layers.0."},
    {"layer.": "layers.1.", "norm.": "norm.", "output.": "output."},
]


def pipeline():
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    assert WORLD == 2, "the pipeline scenario has 2 stages, one per rank"
    steps, lr = 3, 0.1
    ref_losses, ref_state = reference(steps, torch.optim.SGD, lr)
    for schedule_cls in (ScheduleGPipe, Schedule1F1B):
        whole = tl.make_model()
        module = (FirstStage if RANK == 0 else LastStage)(whole).to(DEV)
        # No input_args: the stages exchange shapes at the first step (object send/recv).
        stage = PipelineStage(module, RANK, WORLD, DEV)
        schedule = schedule_cls(stage, n_microbatches=2, loss_fn=tl.loss_fn)
        opt = torch.optim.SGD(module.parameters(), lr=lr)
        losses = []
        for step in range(steps):
            x, y = tl.batch(step, GLOBAL_BATCH)
            opt.zero_grad()
            if RANK == 0:
                schedule.step(x.to(DEV))
            else:
                micro = []
                schedule.step(target=y.to(DEV), losses=micro)
                # Equal microbatches: the mean of their mean losses is the batch's mean loss.
                losses.append(torch.stack([m.detach() for m in micro]).mean().item())
            opt.step()
        state = {}
        for name, t in module.state_dict().items():
            prefix = next(p for p in STAGE_NAMES[RANK] if name.startswith(p))
            state[STAGE_NAMES[RANK][prefix] + name[len(prefix) :]] = t
        if RANK == WORLD - 1:
            compare_losses(losses, ref_losses, schedule_cls.__name__)
        worst = compare_params(state, ref_state, schedule_cls.__name__, names=state.keys())
        print(f"rank {RANK} {schedule_cls.__name__} 2-stage pipeline ok: worst param diff {worst:.2e}", flush=True)
        dist.barrier()


# --- distributed checkpoint, saved under one sharding, loaded under another ----------------------


def checkpoint(directory):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    lr, saved_after = 1e-2, 2
    ref_losses, ref_state = reference(saved_after + 1, torch.optim.AdamW, lr)
    path = os.path.join(directory, "step2")

    # 1. FSDP2 over all ranks (each parameter's dim 0 split): 2 AdamW steps, then save the model
    # and the optimizer state (its moments are sharded like the parameters).
    fsdp = tl.make_model().to(DEV)
    for layer in fsdp.layers:
        fully_shard(layer)
    fully_shard(fsdp)
    opt = torch.optim.AdamW(fsdp.parameters(), lr=lr)
    per = GLOBAL_BATCH // WORLD
    for step in range(saved_after):
        x, y = tl.batch(step, GLOBAL_BATCH)
        loss = tl.loss_fn(fsdp(x[RANK * per : (RANK + 1) * per].to(DEV)), y[RANK * per : (RANK + 1) * per].to(DEV))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model_sd, optim_sd = get_state_dict(fsdp, opt)
    at_save = {k: full(v) for k, v in model_sd.items()}
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)

    # 2. Load into tensor + sequence parallel (heads / MLP columns split, norms sequence-sharded),
    # a different model (seed 1) so that every value must come from the checkpoint.
    mesh = init_device_mesh("neuron", (WORLD,))
    tp = tl.apply_tp(tl.make_model(seed=1).to(DEV), mesh, sequence_parallel=True)
    tp_opt = torch.optim.AdamW(tp.parameters(), lr=lr)
    # The optimizer needs its state before it can be loaded into: one zero-gradient step creates it.
    for p in tp.parameters():
        p.grad = torch.zeros_like(p)
    tp_opt.step()
    model_sd, optim_sd = get_state_dict(tp, tp_opt)
    dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    set_state_dict(tp, tp_opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
    for name, t in tp.state_dict().items():
        assert torch.equal(full(t), at_save[name]), f"TP copy of {name} is not the saved FSDP2 value"
    # One more step from the loaded moments matches 3 uninterrupted single-process steps.
    x, y = tl.batch(saved_after, GLOBAL_BATCH)
    loss = tl.loss_fn(tp(x.to(DEV)), y.to(DEV))
    tp_opt.zero_grad()
    loss.backward()
    tp_opt.step()
    loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
    compare_losses([loss.item()], ref_losses[saved_after:], "FSDP2 -> TP resumed")
    worst = compare_params(tp.state_dict(), ref_state, "FSDP2 -> TP resumed")
    dist.barrier()

    # 3. Load the same checkpoint unsharded, in one process without a process group.
    if RANK == 0:
        plain = tl.make_model(seed=2)
        state = {"model": plain.state_dict()}
        dcp.load(state, checkpoint_id=path, no_dist=True)
        plain.load_state_dict(state["model"])
        for name, t in plain.state_dict().items():
            assert torch.equal(t, at_save[name]), f"unsharded copy of {name} is not the saved value"
    print(f"rank {RANK} DCP FSDP2 -> TP -> single process ok: worst param diff {worst:.2e}", flush=True)


# --- activation checkpointing under FSDP2 -----------------------------------------------------


def activation_checkpointing():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    steps, lr = 3, 0.1
    ref_losses, ref_state = reference(steps, torch.optim.SGD, lr)
    model = tl.make_model().to(DEV)
    calls = [0]

    def count(module, args):
        calls[0] += 1

    for i, layer in enumerate(model.layers):
        layer.register_forward_pre_hook(count)
        # torchtitan's full activation checkpointing: each block's activations are dropped after
        # the forward and recomputed during the backward.
        model.layers[i] = checkpoint_wrapper(layer, preserve_rng_state=False)
    mp = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    per = GLOBAL_BATCH // WORLD
    losses = []
    for step in range(steps):
        x, y = tl.batch(step, GLOBAL_BATCH)
        loss = tl.loss_fn(model(x[RANK * per : (RANK + 1) * per].to(DEV)), y[RANK * per : (RANK + 1) * per].to(DEV))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    # Each block ran twice a step: the forward and its recomputation in the backward.
    assert calls[0] == 2 * tl.LAYERS * steps, f"{calls[0]} block forwards in {steps} steps: not recomputed"
    compare_losses(losses, ref_losses, "FSDP2 + activation checkpointing")
    # The wrapper inserts its own name into the parameter names.
    state = {k.replace("._checkpoint_wrapped_module", ""): v for k, v in model.state_dict().items()}
    worst = compare_params(state, ref_state, "FSDP2 + activation checkpointing")
    print(f"rank {RANK} FSDP2 + activation checkpointing ok: worst param diff {worst:.2e}", flush=True)


def main():
    import traceback

    scenarios = {"pp": pipeline, "dcp": lambda: checkpoint(sys.argv[2]), "ac": activation_checkpointing}
    names = sys.argv[1].split(",")
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}: choose from {list(scenarios)}")
    dist.init_process_group("neuron", device_id=torch.device("neuron", 0))
    failed = []
    for name in names:
        try:
            scenarios[name]()
        except AssertionError:
            # A wrong result on this rank: the other scenarios can still run (their collectives
            # are matched on every rank). Any other error leaves the group in an unknown state.
            traceback.print_exc()
            failed.append(name)
        dist.barrier()
    dist.destroy_process_group()
    if failed:
        raise SystemExit(f"rank {RANK}: scenarios {failed} failed")


if __name__ == "__main__":
    main()

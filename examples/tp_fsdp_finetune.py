"""Fine-tune a tiny Llama with tensor parallelism inside each model replica and FSDP2 across the
replicas: the layout of Hugging Face's TorchNeuron fine-tuning example (32 processes on one
trn1.32xlarge, TP=4 x FSDP=8), here on the simulated instance. The result is a plain transformers
checkpoint (config.json + model.safetensors) that loads on CPU without torch.distributed.

    # the seed's layout: 32 ranks, one per NeuronCore of the trn1.32xlarge preset (make finetune-32)
    NRTSIM_INSTANCE=trn1.32xlarge torchrun --nproc-per-node 32 examples/tp_fsdp_finetune.py \\
        --tp 4 --out /tmp/tiny-llama-tp-fsdp --verify
    # what `make test` runs (tests/distributed/test_ecosystem.py): 4 ranks, TP=2 x FSDP=2
    torchrun --nproc-per-node 4 examples/tp_fsdp_finetune.py --tp 2 --verify

The script is ordinary PyTorch + transformers. The only thing that names the device is the string
"neuron" (process-group backend, mesh device type, `.to`): under torchrun each process sees only
its own NeuronCore (LOCAL_RANK -> NEURON_RT_VISIBLE_CORES, as TorchNeuron does), so the model lives
on neuron:0 of the process.

Data: byte-level tokens (vocabulary 256, no tokenizer to download) of the shipped corpus
examples/data/tiny_facts.txt, cut into fixed-length windows; step s trains on the windows
s*B .. s*B+B-1 of the global batch B, replica r taking its own consecutive rows. Every rank
derives the same batches, so no data loader or sampler is needed.

--verify reruns the same fine-tune in a single CPU process (no torch.distributed) on rank 0 and
compares the losses, the gathered parameters and the saved-then-reloaded checkpoint with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import torch
import torch.distributed as dist

DATA = Path(__file__).parent / "data" / "tiny_facts.txt"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", type=int, default=4, help="tensor-parallel degree (cores per replica)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-per-replica", type=int, default=2)
    p.add_argument("--seq", type=int, default=32, help="tokens per sequence (bytes)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bf16", action="store_true", help="FSDP2 MixedPrecisionPolicy: bf16 compute, fp32 reduce")
    p.add_argument("--init", default=None, help="a transformers Llama checkpoint to start from (default: seeded init)")
    p.add_argument("--out", default=None, help="where rank 0 saves the checkpoint (default ./tiny-llama-tp-fsdp)")
    p.add_argument("--verify", action="store_true", help="compare with a single-process CPU run")
    p.add_argument("--metrics", default=None, help="rank 0 writes losses, times and memory here (JSON)")
    return p.parse_args(argv)


def tiny_config(tp: int):
    from transformers import LlamaConfig

    # Heads and KV heads are multiples of the TP degree, so every rank holds whole heads
    # (the attention reshapes to (-1, head_dim) and so works on the local heads unchanged).
    return LlamaConfig(
        vocab_size=256,
        hidden_size=16 * tp,
        intermediate_size=32 * tp,
        num_hidden_layers=2,
        num_attention_heads=2 * tp,
        num_key_value_heads=tp,
        head_dim=8,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


def initial_model(args):
    """The same initial weights on every rank (and in the reference): the --init checkpoint, or a
    seeded random init."""
    from transformers import LlamaForCausalLM

    if args.init:
        return LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32)
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config(args.tp))


def windows(seq: int) -> torch.Tensor:
    data = torch.frombuffer(bytearray(DATA.read_bytes()), dtype=torch.uint8).long()
    n = data.numel() // seq
    return data[: n * seq].view(n, seq)


def global_batch(all_windows: torch.Tensor, step: int, size: int) -> torch.Tensor:
    rows = (torch.arange(size) + step * size) % all_windows.shape[0]
    return all_windows[rows]


def parallelize(model, mesh, bf16: bool):
    """TP on the "tp" mesh dimension (attention heads and MLP columns split, outputs summed), then
    FSDP2 on the "dp" dimension: each decoder layer is one FSDP unit, the root holds the embedding,
    final norm and LM head."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    # The layer's own plan in transformers (LlamaConfig.base_model_tp_plan), as torch styles.
    plan = {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),
    }
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], plan)
    kw = {"mesh": mesh["dp"]}
    if bf16:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def train(model, batches, lr, device, loss_group=None):
    """AdamW on the batches; returns the loss per step (averaged over `loss_group`)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses, times = [], []
    for tokens in batches:
        begin = time.perf_counter()
        tokens = tokens.to(device)
        loss = model(input_ids=tokens, labels=tokens).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss = loss.detach().float()
        if loss_group is not None:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=loss_group)
        losses.append(loss.item())
        times.append(time.perf_counter() - begin)
    return losses, times


def reference(args, all_windows, dp_size):
    """The same fine-tune in one CPU process: every step on the whole global batch."""
    model = initial_model(args)
    gbs = dp_size * args.batch_per_replica
    losses, _ = train(model, [global_batch(all_windows, s, gbs) for s in range(args.steps)], args.lr, "cpu")
    return losses, model


def check(args, losses, state, out, ref_losses, ref_model):
    """Distributed vs single-process. fp32: the runs differ only in summation order (sharded
    matmuls summed by all-reduce, replica gradients averaged by reduce-scatter), a few float32
    roundings (~1e-7 relative) per op, i.e. a small absolute error delta in each gradient element.
    AdamW's update g / (sqrt(v) + eps) is about lr * sign(g) in these first steps; it is most
    sensitive where a gradient element is near zero (|g| ~ eps = 1e-8), where delta moves the update
    by up to lr * delta / eps. Float32 sums over this model's batch leave delta ~1e-11 outside rare
    cancellations: <= 2e-3 * lr per step. On top, the update itself rounds differently when the
    two optimizers order their arithmetic differently: a few half-ulps (2^-24 relative) of a
    parameter of magnitude up to 1 (the norm weights). Allowed: steps * (2e-3 * lr + 4 * 2^-24).
    bf16 compute (8-bit mantissa, ~0.4% per rounding, ~1% through a layer) changes gradients by a
    few percent; where a gradient is near zero its sign can flip, so an element may move by up to
    2 * lr per step: parameters within 2 * lr * steps, losses within 3%."""
    from transformers import LlamaForCausalLM

    if args.bf16:
        loss_rtol, atol = 3e-2, 2 * args.lr * args.steps
    else:
        loss_rtol, atol = 1e-5, args.steps * (2e-3 * args.lr + 4 * 2.0**-24)
    for step, (a, b) in enumerate(zip(losses, ref_losses)):
        if abs(a - b) > loss_rtol * abs(b):
            raise AssertionError(f"step {step}: loss {a} vs single-process {b} (rtol {loss_rtol})")
    reloaded = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32)  # CPU, no dist
    ref_state = ref_model.state_dict()
    worst = 0.0
    for name, want in ref_state.items():
        for what, got in (("gathered", state[name]), ("reloaded", reloaded.state_dict()[name])):
            diff = (got.float() - want).abs().max().item()
            worst = max(worst, diff)
            if diff > atol:
                raise AssertionError(f"{what} {name} differs from single-process by {diff} (atol {atol})")
    # The reloaded checkpoint is the gathered state exactly, and predicts as the reference does.
    probe = global_batch(windows(args.seq), 999, 2)
    with torch.no_grad():
        got_logits, want_logits = reloaded(probe).logits, ref_model(probe).logits
    for name, t in reloaded.state_dict().items():
        if not torch.equal(t, state[name].float()):
            raise AssertionError(f"reloaded {name} is not the saved tensor")
    logit_diff = (got_logits - want_logits).abs().max().item()
    return worst, logit_diff


def report_startup():
    """Under torchrun, say how many ranks have started as they come: 32 interpreters importing torch
    on a few cores take about a minute, which would otherwise pass in silence. Each rank counts
    itself in on torchrun's store; the ranks that bring the count to a quarter, a half, ... say so.
    (Once every rank is in, creating the process group reports who is late: docs/distributed.md.)"""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    world = int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    count = store.add("tp_fsdp_finetune/started", 1)
    if count == 1:
        store.set("tp_fsdp_finetune/first", str(time.time()))
    step = max(1, world // 4)
    if count == 1 or count % step == 0 or count == world:
        since = time.time() - float(store.get("tp_fsdp_finetune/first"))
        print(f"[startup] {count} of {world} ranks have imported torch ({since:.0f} s after the first)", flush=True)


def main(argv=None):
    args = parse_args(argv)
    report_startup()
    t_start = time.perf_counter()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("neuron", device_id=torch.device("neuron", 0))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.tp:
        raise SystemExit(f"world size {world} is not a multiple of --tp {args.tp}: launch tp * replicas ranks")
    dp_size = world // args.tp
    mesh = init_device_mesh("neuron", (dp_size, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()

    all_windows = windows(args.seq)
    gbs = dp_size * args.batch_per_replica
    mine = slice(dp_rank * args.batch_per_replica, (dp_rank + 1) * args.batch_per_replica)
    batches = [global_batch(all_windows, s, gbs)[mine] for s in range(args.steps)]

    model = parallelize(initial_model(args).to("neuron"), mesh, args.bf16)
    t_setup = time.perf_counter()
    losses, step_times = train(model, batches, args.lr, "neuron", mesh["dp"].get_group())
    t_train = time.perf_counter()
    if rank == 0:
        for step, loss in enumerate(losses):
            print(f"step {step}: loss {loss:.4f} ({step_times[step]:.2f} s)", flush=True)

    # Gather the unsharded fp32 weights onto rank 0's CPU (a collective: every rank takes part).
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # Peak memory per rank: the process's resident set and its NeuronCore's HBM high-water mark.
    peaks = torch.tensor(
        [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, torch.neuron.max_memory_allocated() / 2**20],
        dtype=torch.float32,
        device="neuron",
    )
    gathered = [torch.empty_like(peaks) for _ in range(world)] if rank == 0 else None
    dist.gather(peaks, gathered, dst=0)
    out = args.out or os.path.join(os.getcwd(), "tiny-llama-tp-fsdp")
    if rank == 0:
        from transformers import LlamaForCausalLM

        plain = LlamaForCausalLM(model.config)
        plain.load_state_dict(state)
        plain.save_pretrained(out)
        t_saved = time.perf_counter()
        per_rank = torch.stack([g.cpu() for g in gathered])
        metrics = {
            "world": world,
            "tp": args.tp,
            "fsdp": dp_size,
            "bf16": args.bf16,
            "losses": losses,
            "step_seconds": step_times,
            "setup_seconds": t_setup - t_start,
            "train_seconds": t_train - t_setup,
            "total_seconds": t_saved - t_start,
            "peak_rss_mib_max": per_rank[:, 0].max().item(),
            "peak_rss_mib_sum": per_rank[:, 0].sum().item(),
            "peak_hbm_mib_max": per_rank[:, 1].max().item(),
            "checkpoint": out,
        }
        print(
            f"{world} ranks (TP={args.tp} x FSDP={dp_size}): {args.steps} steps in {t_train - t_setup:.1f} s, "
            f"{t_saved - t_start:.1f} s in all; peak RSS per rank {metrics['peak_rss_mib_max']:.0f} MiB "
            f"({metrics['peak_rss_mib_sum'] / 1024:.1f} GiB over all ranks), peak HBM per core "
            f"{metrics['peak_hbm_mib_max']:.2f} MiB; saved {out}",
            flush=True,
        )
        if args.verify:
            ref_losses, ref_model = reference(args, all_windows, dp_size)
            worst, logit_diff = check(args, losses, state, out, ref_losses, ref_model)
            metrics.update(reference_losses=ref_losses, worst_param_diff=worst, probe_logit_diff=logit_diff)
            print(
                f"verified against one CPU process: losses {[round(v, 5) for v in ref_losses]}, "
                f"worst parameter difference {worst:.2e}, probe logits {logit_diff:.2e}; reloaded on CPU ok",
                flush=True,
            )
        if args.metrics:
            Path(args.metrics).write_text(json.dumps(metrics, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

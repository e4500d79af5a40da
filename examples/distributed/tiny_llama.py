"""A tiny Llama (RMSNorm, rotary attention with grouped KV heads, SwiGLU MLP, tied nothing) small
enough for 2-4 ranks on two CPU cores, written like torchtitan's so that its tensor-parallel plan
is the standard one. Shared by the parallelism workers and the example."""

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HIDDEN, SEQ = 128, 32, 2, 4, 2, 64, 8


def rotary(x, base=10000.0):
    # x: (batch, seq, heads, head_dim); rotation angles from the (global) sequence positions.
    b, s, h, d = x.shape
    freqs = 1.0 / base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = torch.arange(s, device=x.device, dtype=torch.float32)[:, None] * freqs[None, :]
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.to(x.dtype)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq = nn.Linear(DIM, HEADS * self.head_dim, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.wo = nn.Linear(HEADS * self.head_dim, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds a slice of the heads.
        q = rotary(self.wq(x).view(b, s, -1, self.head_dim))
        k = rotary(self.wk(x).view(b, s, -1, self.head_dim))
        v = self.wv(x).view(b, s, -1, self.head_dim)
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM, eps=1e-5)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM, eps=1e-5)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class TinyLlama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(DIM, eps=1e-5)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def make_model(seed=0):
    torch.manual_seed(seed)
    return TinyLlama()


def batch(step, n=4, seed=1):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    tokens = torch.randint(0, VOCAB, (n, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def loss_fn(logits, targets):
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))


def train_single_process(steps, optimizer=torch.optim.SGD, lr=0.1, global_batch=4):
    """The run every parallel layout is checked against: one process, CPU, float32, the same
    global batches. Returns the losses and the final parameters."""
    model = make_model()
    opt = optimizer(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = batch(step, global_batch)
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach() for k, v in model.state_dict().items()}


def full_cpu(t):
    """A parameter as one float32 CPU tensor, gathered first if it is a DTensor shard."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu().float()


def tp_plan(sequence_parallel=True):
    """torchtitan's Llama plan: attention/FFN inputs column-wise, outputs row-wise; with sequence
    parallelism the norms and the residual stream stay sharded on the sequence dimension."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    seq = Shard(1) if sequence_parallel else Replicate()
    block = {
        "attention": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=seq),
        "feed_forward": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=seq),
        "feed_forward.w3": ColwiseParallel(),
    }
    if sequence_parallel:
        block["attention_norm"] = SequenceParallel()
        block["ffn_norm"] = SequenceParallel()
    top = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "output": ColwiseParallel(input_layouts=seq, output_layouts=Replicate()),
    }
    if sequence_parallel:
        top["norm"] = SequenceParallel()
    return top, block


def apply_tp(model, mesh, sequence_parallel=True):
    from torch.distributed.tensor.parallel import parallelize_module

    top, block = tp_plan(sequence_parallel)
    parallelize_module(model, mesh, top)
    for layer in model.layers:
        parallelize_module(layer, mesh, block)
    return model

"""A script that does, once each, what would differ on TorchNeuron 2.33. Every line the report
must name carries a marker comment with the category; no other line may be reported
(test_portability.py compares the two sets)."""

import torch

device = torch.device("neuron")
x = torch.arange(64, dtype=torch.float32).reshape(8, 8).div(64).to(device)

s = torch.cumprod(x, dim=0)  # expect: cpu_fallback
r = torch.randn(4, device=device)  # expect: cpu_fallback
d = torch.ones(4, dtype=torch.float64).to(device)  # expect: float64
c = torch.zeros(4, dtype=torch.complex64, device=device)  # expect: complex
big = torch.tensor([2**40]).to(device)  # expect: int64_range
img = torch.zeros(2, 3, 4, 4, device=device)
# This backend computes the format as the CPU does; TorchNeuron raises.
cl = img.contiguous(memory_format=torch.channels_last)  # expect: channels_last
vol = torch.empty(1, 2, 2, 2, 2, device=device, memory_format=torch.channels_last_3d)  # expect: channels_last
for n in (3, 4, 5):
    part = x[:n].exp()  # expect: dynamic_shapes
    total = x.sum()  # the same shape every time: fine


def step(t):
    return (t * 2).sum(0)


compiled = torch.compile(step, backend="neuron")
for n in (4, 5, 6):
    compiled(x[:n])  # expect: recompile


def breaks(t):
    t = t + 1
    print("portability: a graph break")  # expect: graph_break
    return t * 2


torch.compile(breaks, backend="neuron")(x)


def scaled(t):
    return t * 3


torch.compile(scaled, backend="neuron", dynamic=True)(x)  # expect: dynamic_compile

"""Quickstart: train a small model on the `neuron` device and check it against the CPU.

The script is ordinary PyTorch: the only neuron-specific line is the device string. `import torch`
alone makes `neuron` available (the backend autoloads); nrtsim simulates the NeuronCores.

    make demo        # or: .venv/bin/python examples/quickstart.py
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 60


class TinyClassifier(nn.Module):
    """A two-layer MLP with LayerNorm: linear algebra, normalisation, activations, a loss."""

    def __init__(self, features: int = 32, hidden: int = 64, classes: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


def make_data(n: int = 512, features: int = 32, classes: int = 4):
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(classes, features, generator=g) * 2
    labels = torch.randint(0, classes, (n,), generator=g)
    inputs = centers[labels] + torch.randn(n, features, generator=g)
    return inputs, labels


def train(device: str):
    torch.manual_seed(0)
    model = TinyClassifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    inputs, labels = (t.to(device) for t in make_data())
    losses = []
    start = time.perf_counter()
    for step in range(STEPS):
        batch = slice((step * 64) % 512, (step * 64) % 512 + 64)
        loss = F.cross_entropy(model(inputs[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    elapsed = time.perf_counter() - start
    accuracy = (model(inputs).argmax(dim=1) == labels).float().mean().item()
    return losses, accuracy, elapsed


def main():
    print(f"torch {torch.__version__}; accelerator: {torch.accelerator.current_accelerator()}")
    props = torch.neuron.get_device_properties(0)
    print(f"neuron devices: {torch.neuron.device_count()} x {props.name} "
          f"({props.total_memory / 2**30:.0f} GiB HBM each)")

    import torch_neuronx

    clock_before = torch_neuronx.simulated_time(0)
    neuron_losses, neuron_acc, neuron_time = train("neuron")
    clock_after = torch_neuronx.simulated_time(0)
    cpu_losses, cpu_acc, cpu_time = train("cpu")

    for step in (0, STEPS // 4, STEPS // 2, STEPS - 1):
        print(f"step {step:3d}   loss neuron {neuron_losses[step]:.4f}   cpu {cpu_losses[step]:.4f}")
    max_diff = max(abs(a - b) for a, b in zip(neuron_losses, cpu_losses))
    print(f"accuracy: neuron {neuron_acc:.3f}, cpu {cpu_acc:.3f}; "
          f"max loss difference {max_diff:.2e}; time neuron {neuron_time:.2f}s, cpu {cpu_time:.2f}s")

    # The simulated Trainium clock: what the same launches would take on a NeuronCore.
    modelled_ms = (clock_after["now_ns"] - clock_before["now_ns"]) / 1e6
    busy = {e: (clock_after["busy_ns"][e] - clock_before["busy_ns"][e]) / 1e6 for e in clock_after["busy_ns"]}
    print(f"modelled NeuronCore time of the neuron run: {modelled_ms:.2f} ms "
          f"(engines busy, ms: " + ", ".join(f"{e} {t:.2f}" for e, t in busy.items()) + ")")

    fallbacks = torch_neuronx.get_fallback_ops()
    print(f"ops that ran through the CPU fallback: {len(fallbacks)}"
          + (f" ({', '.join(fallbacks[:6])}{', ...' if len(fallbacks) > 6 else ''})" if fallbacks else ""))
    print(f"peak neuron memory: {torch.neuron.max_memory_allocated() / 1024:.1f} KiB")

    assert neuron_losses[-1] < 0.5 * neuron_losses[0], "the loss did not fall on neuron"
    assert max_diff < 1e-3, f"neuron and CPU losses diverged by {max_diff}"
    print("OK: the loss fell on neuron and matches the CPU run.")


if __name__ == "__main__":
    main()

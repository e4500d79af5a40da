"""Code that ports to TorchNeuron 2.33 as is: float32, fixed shapes, ops it runs natively, a
compiled function with one input shape. The portability report must find nothing here."""

import torch

torch.manual_seed(0)
device = torch.device("neuron")
model = torch.nn.Sequential(
    torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8), torch.nn.LayerNorm(8),
    torch.nn.Linear(8, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
features = torch.linspace(-1, 1, 8 * 16).reshape(8, 16)
labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])

for step in range(3):
    inputs, targets = features.to(device), labels.to(device)
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def scale(t):
    return torch.softmax(t * 2, dim=-1)


compiled = torch.compile(scale, backend="neuron", fullgraph=True)
for _ in range(2):
    compiled(features.to(device))
print(f"clean: loss {loss.item():.4f}")

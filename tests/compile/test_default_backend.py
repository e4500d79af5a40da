"""torch.compile without a backend on neuron tensors compiles with the neuron backend, as
TorchNeuron documents ("backend: 'neuron', explicitly set, or auto-selected when running on a
Neuron device"); it used to fail inside Inductor with KeyError: 'neuron'. And the line a cold
compile prints while it runs (torch_neuronx/dynamo/progress.py)."""

import logging

import pytest
import torch

from torch_neuronx.dynamo import default_backend, progress


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)) * 2 + x


def test_no_backend_on_neuron_tensors_compiles_with_the_neuron_backend():
    torch.manual_seed(0)
    model = Block().to("neuron")
    x = torch.randn(4, 8, device="neuron", requires_grad=True)
    expected = model(x)
    expected.sum().backward()
    grad_expected = x.grad.clone()
    x.grad = None
    got = torch.compile(model)(x)
    got.sum().backward()
    m = torch.neuron.get_dynamo_metrics()
    assert m["graphs"] == 1 and m["programs"] >= 1 and m["program_launches"] >= 1, m
    assert got.device.type == "neuron"
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x.grad, grad_expected)


def test_routing_looks_at_the_graph_devices():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    assert default_backend.graph_uses_neuron(gm, [torch.ones(2, device="neuron")])
    assert not default_backend.graph_uses_neuron(gm, [torch.ones(2)])
    # A factory on neuron inside the graph, and a neuron constant it holds.
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    ones = graph.call_function(torch.ones, (2,), {"device": torch.device("neuron")})
    graph.output(graph.call_function(torch.add, (x, ones)))
    factory = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert default_backend.graph_uses_neuron(factory, [torch.ones(2)])
    held = torch.fx.symbolic_trace(lambda x: x + torch.ones(2, device="neuron"))
    assert default_backend.graph_uses_neuron(held, [torch.ones(2)])
    # Installed once, on PyTorch's Inductor entry point.
    assert torch._TorchCompileInductorWrapper.__call__._routes_neuron


def _compile_fresh_graph(scale):
    fn = torch.compile(lambda x: torch.tanh(x) * scale + 1, backend="neuron")
    return fn(torch.randn(16, device="neuron"))


def test_cold_compile_prints_one_line_with_the_graph_and_its_time(monkeypatch, capfd):
    monkeypatch.setattr(progress, "NOTICE_AFTER_S", 0.0)
    _compile_fresh_graph(3.0)
    lines = [line for line in capfd.readouterr().err.splitlines() if "compiling" in line]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("torch_neuronx: compiling graph ")
    assert "ops, programs graph" in line
    assert 'for torch.compile(backend="neuron") ... ' in line
    seconds = line.rsplit("... ", 1)[1]
    assert float(seconds.split(" s")[0]) >= 0
    assert seconds.endswith("program") or seconds.endswith("programs")


def test_compile_line_can_be_silenced(monkeypatch, capfd):
    monkeypatch.setattr(progress, "NOTICE_AFTER_S", 0.0)
    logger = logging.getLogger("torch_neuronx.compile")
    monkeypatch.setattr(logger, "level", logging.WARNING)
    _compile_fresh_graph(5.0)
    assert "compiling" not in capfd.readouterr().err


def test_a_quick_compile_prints_nothing(monkeypatch, capfd):
    monkeypatch.setattr(progress, "NOTICE_AFTER_S", 3600.0)
    _compile_fresh_graph(7.0)
    assert "compiling" not in capfd.readouterr().err

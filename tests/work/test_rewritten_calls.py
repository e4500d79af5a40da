"""Guard: a compiled program counts a decomposed call once, as eager's launch, even after
Inductor's joint-graph passes rewrite its parts. The shipped pipeline rewrites nll_loss_backward's
scatter into zeros as where(iota == target, -1, 0); those new nodes belong to the call
(program_work._adopt_rewritten) and must not count again beside it."""

import torch
import torch.nn.functional as F

from torch_neuronx.dynamo import program_work

REWRITTEN_PARTS = {"aten::eq", "aten::where", "prims::iota", "aten::scalar_tensor"}


def test_rewritten_parts_count_with_their_call(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")  # compile, never load
    programs = []
    init = program_work.ProgramWork.__init__

    def recording(self, gm, example_inputs):
        init(self, gm, example_inputs)
        programs.append(self)

    monkeypatch.setattr(program_work.ProgramWork, "__init__", recording)
    torch._dynamo.reset()
    try:
        x = torch.randn(32, 64, device="neuron", requires_grad=True)
        target = torch.randint(0, 64, (32,), device="neuron")
        loss = torch.compile(lambda x: F.cross_entropy(x, target), backend="neuron", fullgraph=True)
        loss(x).backward()
    finally:
        torch._dynamo.reset()
    forward, backward = programs
    ops = [call.op for call in backward._calls]
    assert ops.count("aten::nll_loss_backward") == 1, ops
    assert not REWRITTEN_PARTS & set(ops), ops

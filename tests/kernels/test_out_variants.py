"""out= forms on neuron as on the CPU: values, the outputs' sizes after resizing, and what is
refused. torch.mode(..., out=) is a composite on every backend that refused any device but the
CPU, CUDA and XPU ("mode only supports CPU, CUDA and XPU device type, got: neuron")."""

import pytest
import torch

DEV = "neuron"


def run(device, call):
    torch.manual_seed(0)
    x = torch.randint(0, 4, (5, 7)).float().to(device)
    return call(x)


CALLS = {
    "mode_out": lambda x: torch.mode(x, 1, out=(x.new_empty(0), x.new_empty(0, dtype=torch.long))),
    "mode_out_keepdim": lambda x: torch.mode(
        x, 0, keepdim=True, out=(x.new_empty(3), x.new_empty(3, dtype=torch.long))),
    "kthvalue_out": lambda x: torch.kthvalue(
        x, 2, 1, out=(x.new_empty(0), x.new_empty(0, dtype=torch.long))),
    "median_out": lambda x: torch.median(
        x, 1, out=(x.new_empty(0), x.new_empty(0, dtype=torch.long))),
    "sort_out": lambda x: torch.sort(
        x, dim=1, stable=True, out=(x.new_empty(0), x.new_empty(0, dtype=torch.long))),
    "cumsum_out": lambda x: (torch.cumsum(x, 1, out=x.new_empty(1)),),
}


@pytest.mark.parametrize("call", CALLS)
def test_out_form_matches_cpu(call):
    expected = run("cpu", CALLS[call])
    got = run(DEV, CALLS[call])
    for g, e in zip(got, expected):
        assert g.device.type == DEV
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)

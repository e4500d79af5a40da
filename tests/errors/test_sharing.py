"""Neuron tensors cannot be shared between processes: a NeuronCore's memory belongs to the one
process that owns the core (nrtsim's HBM is that process's host memory), so there is no handle
another process could open, as CUDA IPC has, and a copy would silently drop updates made on the
other side. Every way a tensor crosses a process boundary through torch.multiprocessing raises
one clear error naming the limit and the fix, before any process starts; CPU tensors are shared
as before, and the fix the error names works end to end."""

import json
import multiprocessing
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

LIMIT = "neuron tensors cannot be shared between processes"
FIX = "Send a CPU tensor instead (tensor.cpu()"


def _senders():
    t = torch.arange(6.0).reshape(2, 3).to("neuron")
    return {
        "tensor": (t, "a torch.float32 tensor of shape (2, 3) on neuron:0"),
        "view": (t[:, 1:], "a torch.float32 tensor of shape (2, 2) on neuron:0"),
        "requires_grad": (t.clone().requires_grad_(), "tensor of shape (2, 3) on neuron:0"),
        "parameter": (torch.nn.Parameter(t.clone()), "tensor of shape (2, 3) on neuron:0"),
        "untyped_storage": (t.untyped_storage(), "a storage of 24 bytes on neuron:0"),
        "in_a_dict": ({"weights": [t]}, "tensor of shape (2, 3) on neuron:0"),
        "module_state": (torch.nn.Linear(3, 2).to("neuron").state_dict(), "on neuron:0"),
        "second_core": (torch.ones(4, device="neuron:1"), "tensor of shape (4,) on neuron:1"),
    }


@pytest.mark.parametrize("what", list(_senders()))
def test_pickling_for_another_process_is_a_clear_error(what):
    obj, described = _senders()[what]
    with pytest.raises(RuntimeError) as info:
        ForkingPickler.dumps(obj)
    message = str(info.value)
    assert described in message and LIMIT in message and FIX in message, message
    assert "_share_fd_" not in message


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_typed_storage_too():
    with pytest.raises(RuntimeError, match="a storage of 12 bytes on neuron:0"):
        ForkingPickler.dumps(torch.ones(3, device="neuron").storage())


def test_cpu_tensors_are_still_shared():
    """The CPU path is untouched: a CPU tensor pickles through shared memory and the unpickled
    tensor aliases the same memory."""
    t = torch.arange(4.0)
    back = ForkingPickler.loads(ForkingPickler.dumps(t))
    assert t.is_shared() and torch.equal(back, t)
    back[0] = 42.0
    assert t[0].item() == 42.0


def _never_runs(tensor):  # the target of a process that must not start
    raise AssertionError("the child must not start")


def test_process_argument_and_pipe_raise_before_anything_runs():
    ctx = multiprocessing.get_context("spawn")
    t = torch.ones(3, device="neuron")
    process = ctx.Process(target=_never_runs, args=(t,))
    with pytest.raises(RuntimeError, match=LIMIT):
        process.start()
    assert process.pid is None
    receiver, sender = ctx.Pipe(duplex=False)
    with pytest.raises(RuntimeError, match=LIMIT):
        sender.send(t)
    assert not receiver.poll(0.1)
    sender.send(t.cpu())  # the fix, on the same pipe
    assert torch.equal(receiver.recv(), torch.ones(3))


SPAWN_REPORT = r"""
import json
import torch
import torch.multiprocessing as mp


def child(inbox, outbox, received):
    x = inbox.get(timeout=60)            # a CPU tensor, through shared memory
    y = x.to("neuron") * 2 + 1           # moved to this process's neuron device
    outbox.put(y.cpu())
    received.wait(60)  # a shared CPU tensor's sender must outlive its receipt (PyTorch's rule)


def main():
    ctx = mp.get_context("spawn")
    inbox, outbox, received = ctx.Queue(), ctx.Queue(), ctx.Event()
    p = ctx.Process(target=child, args=(inbox, outbox, received))
    p.start()
    x = torch.arange(6.0, device="neuron").reshape(2, 3)
    report = {}
    try:
        ctx.SimpleQueue().put(x)
        report["simple_queue"] = None
    except RuntimeError as e:
        report["simple_queue"] = str(e)
    inbox.put(x.cpu())                   # the fix the error names
    report["result"] = outbox.get(timeout=60).tolist()
    received.set()
    p.join(60)
    report["exitcode"] = p.exitcode
    print(json.dumps(report))


if __name__ == "__main__":
    main()
"""


def test_the_named_fix_works_across_spawned_processes(python_subprocess, tmp_path):
    """A CPU copy sent through a torch.multiprocessing Queue to a spawned process, moved to neuron
    there and computed on, comes back with the CPU's numbers; sending the neuron tensor itself
    through a SimpleQueue raises the error in the sender."""
    script = tmp_path / "spawn_report.py"  # a file: the spawn child re-imports it for `child`
    script.write_text(SPAWN_REPORT)
    code = f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    result = python_subprocess(code, env={"TORCH_NEURONX_FALLBACK_WARN": "0"}, timeout=180)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert LIMIT in report["simple_queue"]
    assert report["result"] == (torch.arange(6.0).reshape(2, 3) * 2 + 1).tolist()
    assert report["exitcode"] == 0

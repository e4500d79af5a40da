"""Bad input gives a clear error, never a crash or wrong numbers, and leaves the device usable:
mixed devices, bad device indices, impossible memory formats, bad environments (subprocesses)
and neuron use in a child forked after initialisation."""

import json

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")

QUIET = {"TORCH_NEURONX_FALLBACK_WARN": "0"}
BLANK_ENV = {
    **QUIET,
    "NRTSIM_INSTANCE": "",
    "NEURON_LOGICAL_NC_CONFIG": "",
    "NEURON_RT_VISIBLE_CORES": "",
    "NEURON_RT_NUM_CORES": "",
    "NRTSIM_HBM_BYTES": "",
}
RANGE = r"neuron:0( to |-)neuron:3"  # how the errors name the visible devices


def assert_device_works(device="neuron"):
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    n = a.to(device)
    torch.testing.assert_close((n @ n.t() + 1).cpu(), a @ a.t() + 1)


def run_json(python_subprocess, code, env):
    result = python_subprocess(code, env={**BLANK_ENV, **env})
    assert result.returncode == 0, f"subprocess failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- mixing devices ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    [
        lambda n, c: n + c,
        lambda n, c: c + n,
        lambda n, c: n.add_(c),
        lambda n, c: torch.mm(n, c.t()),
        lambda n, c: torch.mm(c, n.t()),
        lambda n, c: torch.cat([n, c]),
        lambda n, c: torch.where(n > 2, n, c),
    ],
    ids=["add", "radd", "add_", "mm", "mm_cpu_first", "cat", "where"],
)
def test_neuron_with_cpu_tensor_raises(op):
    n = torch.arange(6.0).reshape(2, 3).to("neuron")
    c = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match=r"(neuron:0 and cpu|cpu and neuron:0)"):
        op(n, c)
    assert torch.equal(n.cpu(), torch.arange(6.0).reshape(2, 3))  # add_ left nothing half-done
    assert_device_works()


def test_mm_error_names_op_and_fix():
    n = torch.ones(3, 3, device="neuron")
    with pytest.raises(RuntimeError) as info:
        torch.mm(n, torch.ones(3, 3))
    message = str(info.value)
    assert "neuron:0" in message and "cpu" in message
    assert "aten::mm" in message and ".to('neuron')" in message


def test_zero_dim_cpu_tensor_is_accepted_like_on_cuda():
    a = torch.arange(6.0).reshape(2, 3)
    n = a.to("neuron")
    for scalar in (torch.tensor(2.5), torch.tensor(3), torch.tensor(True)):
        out = n * scalar
        assert out.device == torch.device("neuron:0")
        assert torch.equal(out.cpu(), a * scalar)
    assert torch.equal((n + torch.tensor(1.0)).cpu(), a + 1)
    assert torch.equal(torch.add(n, torch.tensor(2.0), alpha=3).cpu(), a + 6)
    assert torch.equal(torch.where(n > 2, n, torch.tensor(0.0)).cpu(), torch.where(a > 2, a, 0.0))


@pytest.mark.parametrize(
    "op",
    [
        lambda n, out: torch.nonzero(n, out=out),
        lambda n, out: torch.cumsum(n, 0, out=out),
        lambda n, out: torch.masked_select(n, n > 2, out=out),
        lambda n, out: torch.add(n, 1, out=out),
        lambda n, out: torch.index_select(n, 0, torch.tensor([0], device="neuron"), out=out),
        lambda n, out: torch.sum(n, 0, out=out),
    ],
    ids=["nonzero", "cumsum", "masked_select", "add", "index_select", "sum"],
)
def test_zero_dim_cpu_out_tensor_is_refused_like_on_cuda(op):
    """A 0-dim CPU tensor is a value an op may read, not a place a neuron kernel may write: as
    out= it is refused with the device-mismatch error (nonzero, cumsum and masked_select once
    filled it from device memory and could leave it with a null data pointer)."""
    n = torch.arange(6.0).to("neuron")
    out = torch.tensor(7)  # int64: what nonzero writes; the others refuse before the dtype
    before = out.data_ptr()
    with pytest.raises(RuntimeError, match=r"same device.*(neuron:0 and cpu|cpu and neuron:0)"):
        op(n, out)
    assert out.data_ptr() == before != 0
    assert out.item() == 7
    assert_device_works()


def test_cpu_index_tensor_is_accepted():
    a = torch.arange(12.0).reshape(4, 3)
    n = a.to("neuron")
    index = torch.tensor([3, 0, 2])
    assert torch.equal(n[index].cpu(), a[index])


def test_two_neuron_devices_raise():
    n0 = torch.ones(2, 3, device="neuron:0")
    n1 = torch.ones(2, 3, device="neuron:1")
    with pytest.raises(RuntimeError, match=r"neuron:0 and neuron:1"):
        n0 + n1
    with pytest.raises(RuntimeError, match=r"neuron:0 and neuron:1"):
        torch.mm(n0, n1.t())
    with pytest.raises(RuntimeError, match=r"neuron:(0 and neuron:1|1 and neuron:0)"):
        n1.mul_(n0)
    assert torch.equal(n1.cpu(), torch.ones(2, 3))
    # Explicit copies between devices are fine.
    assert torch.equal((n0 + n1.to("neuron:0")).cpu(), torch.full((2, 3), 2.0))
    assert_device_works("neuron:1")


# --- overlapping copies -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "copy",
    [
        lambda t: t.view(4, 4).copy_(t.view(4, 4).t()),
        lambda t: t[1:].copy_(t[:-1]),
        lambda t: t[:8].copy_(t[4:12]),
        lambda t: t[:1].expand(4).copy_(torch.arange(4.0)),
    ],
    ids=["transpose_into_itself", "shift_right", "half_overlap", "expanded_destination"],
)
def test_overlapping_copy_raises_like_cpu(copy):
    cpu = torch.arange(16.0)
    with pytest.raises(RuntimeError, match="refer") as cpu_error:
        copy(cpu.clone())
    n = cpu.to("neuron")
    with pytest.raises(RuntimeError, match="refer") as neuron_error:
        copy(n)
    assert str(neuron_error.value) == str(cpu_error.value)
    assert torch.equal(n.cpu(), cpu)  # nothing was written
    assert_device_works()


def test_non_overlapping_views_of_one_storage_copy_like_cpu():
    cpu = torch.arange(16.0)
    n = cpu.to("neuron")
    for t in (cpu, n):
        t[::2].copy_(t[1::2])  # interleaved, never the same element
        t[:4].copy_(t[12:])
        t.copy_(t)  # the same view: a no-op
    assert torch.equal(n.cpu(), cpu)


# --- device indices ---------------------------------------------------------------------------


# torch.neuron's device selection raises ValueError, as TorchNeuron does; paths that reach the
# backend's C++ check through PyTorch raise RuntimeError. The words are the same.
OUT_OF_RANGE = r"^Device index (9|100) is out of range\. Valid range is 0 to 3 for this process"


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: torch.empty(1, device="neuron:9"), RuntimeError),
        (lambda: torch.ones(2).to("neuron:9"), RuntimeError),
        (lambda: torch.neuron.set_device(9), ValueError),
        (lambda: torch.accelerator.set_device_index(9), RuntimeError),
        (lambda: torch.neuron.Stream(device=9), RuntimeError),
        (lambda: torch.neuron.device(9).__enter__(), ValueError),
        (lambda: torch.neuron.synchronize(9), RuntimeError),
        (lambda: torch.neuron.memory_allocated(9), RuntimeError),
        (lambda: torch.empty(1, device=torch.device("neuron", 100)), RuntimeError),
    ],
    ids=["empty", "to", "set_device", "set_device_index", "Stream", "device_ctx", "synchronize",
         "memory_allocated", "index_100"],
)
def test_out_of_range_device_index(call, error):
    with pytest.raises(error, match=OUT_OF_RANGE + ".*" + RANGE):
        call()
    assert torch.neuron.current_device() == 0  # nothing switched
    assert_device_works()


def test_out_of_range_device_properties():
    with pytest.raises(ValueError, match=OUT_OF_RANGE + r".*4 NeuronCore device"):
        torch.neuron.get_device_properties(9)


@pytest.mark.parametrize("call", [
    lambda i: torch.neuron.get_device_properties(i),
    lambda i: torch.neuron.get_device_name(i),
    lambda i: __import__("torch_neuronx").get_device_properties(i),
], ids=["properties", "name", "torch_neuronx.get_device_properties"])
def test_negative_device_index_raises(call):
    """-1 names no device (TorchNeuron's test_get_device_properties_invalid_device; torch.cuda
    refuses it too): it once answered for neuron:0."""
    with pytest.raises(ValueError, match=r"Device index -1 is out of range.*pass None"):
        call(-1)
    assert torch.neuron.get_device_name(None) == "neuron:0"


# --- memory format ----------------------------------------------------------------------------

# Every memory format is computed as on the CPU (tests/kernels/test_memory_formats.py); what is
# left to refuse is a format no tensor can have.


def test_preserve_format_is_refused_where_the_cpu_refuses_it():
    for device in ("cpu", "neuron"):
        with pytest.raises(RuntimeError, match="[Uu]nsupported memory format"):
            torch.empty(1, 2, 3, 4, memory_format=torch.preserve_format, device=device)
        with pytest.raises(RuntimeError, match="[Uu]nsupported memory format"):
            torch.zeros(1, 2, 3, 4, device=device).resize_(2, 2, 3, 4,
                                                           memory_format=torch.preserve_format)
    assert_device_works()


def test_contiguous_and_preserve_formats_work():
    t = torch.empty(1, 2, 3, 4, memory_format=torch.contiguous_format, device="neuron")
    assert t.is_contiguous()
    u = torch.empty_like(t, memory_format=torch.preserve_format)
    assert u.shape == t.shape and u.is_contiguous()


# A channels-last *layout* that an op derives from its inputs is not a request for one: permuted
# views (a model's transposes) with channels-last strides go through elementwise ops, cat,
# pooling and interpolation as on the CPU, with the CPU's output strides.
@pytest.mark.parametrize(
    "op",
    [
        lambda x: -x,
        lambda x: x.pow(2),
        lambda x: torch.nn.functional.silu(x),
        lambda x: torch.cat([x, x], dim=1),
        lambda x: torch.nn.functional.max_pool2d(x, 2),
        lambda x: torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest"),
        lambda x: torch.nn.functional.avg_pool2d(x, 2),
    ],
    ids=["neg", "pow", "silu", "cat", "max_pool2d", "interpolate", "avg_pool2d"],
)
def test_channels_last_strided_inputs_follow_cpu(op):
    base = torch.randn(2, 4, 4, 3)  # NHWC storage: permuted to NCHW it has channels-last strides
    x_cpu = base.permute(0, 3, 1, 2)
    assert x_cpu.is_contiguous(memory_format=torch.channels_last)
    x = base.to("neuron").permute(0, 3, 1, 2).requires_grad_()
    x_cpu = x_cpu.clone().requires_grad_()  # clone keeps the layout (preserve_format)
    expected, got = op(x_cpu), op(x)
    assert got.device.type == "neuron"
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected.detach())
    got.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


# --- bad environments (subprocesses) ----------------------------------------------------------

BAD_ENV_REPORT = """
import json
import torch
r = {"available": torch.neuron.is_available(), "count": torch.neuron.device_count(),
     "accelerator_available": torch.accelerator.is_available(),
     "checked_accelerator": str(torch.accelerator.current_accelerator(check_available=True))}
for name, call in [("empty", lambda: torch.empty(1, device="neuron")),
                   ("init", torch.neuron.init),
                   ("set_device", lambda: torch.neuron.set_device(0))]:
    try:
        call()
        r[name] = None
    except RuntimeError as e:
        r[name] = str(e)
r["cpu_still_works"] = torch.equal(torch.ones(3) * 2, torch.full((3,), 2.0))
r["available_again"] = torch.neuron.is_available()
print(json.dumps(r))
"""


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"NEURON_RT_VISIBLE_CORES": "9"}, ["NEURON_RT_VISIBLE_CORES='9'", "0-3"]),
        ({"NEURON_LOGICAL_NC_CONFIG": "3"}, ["NEURON_LOGICAL_NC_CONFIG=3", "use 1 or 2"]),
        ({"NRTSIM_INSTANCE": "bogus"}, ["NRTSIM_INSTANCE='bogus'", "trn2.3xlarge", "trn1.2xlarge"]),
        ({"NEURON_RT_NUM_CORES": "0"}, ["NEURON_RT_NUM_CORES=0", "between 1 and 4"]),
        ({"NRTSIM_HBM_BYTES": "lots"}, ["NRTSIM_HBM_BYTES='lots'", "512MiB"]),
    ],
    ids=["visible_cores", "lnc", "instance", "num_cores", "hbm_bytes"],
)
def test_bad_environment(python_subprocess, env, expected):
    r = run_json(python_subprocess, BAD_ENV_REPORT, env)
    assert r["available"] is False and r["available_again"] is False
    assert r["count"] == 0
    assert r["accelerator_available"] is False
    assert r["checked_accelerator"] == "None"
    for call in ("empty", "init", "set_device"):
        message = r[call]
        assert message is not None, f"{call} did not raise"
        assert "no neuron device is available" in message
        for part in expected:
            assert part in message, (call, part, message)
    assert r["cpu_still_works"]


# --- fork -------------------------------------------------------------------------------------

FORK_REPORT = r"""
import json, os
import torch
import torch.multiprocessing as mp


def child_uses_neuron(queue):
    x = torch.arange(4.0, device="neuron")
    queue.put((x * 2).cpu().tolist())


def in_child(conn_w, calls):
    out = {}
    for name, call in calls:
        try:
            call()
            out[name] = None
        except RuntimeError as e:
            out[name] = str(e)
    out["cpu"] = torch.equal(torch.ones(2) + 1, torch.full((2,), 2.0))
    out["bad_fork"] = torch.neuron._is_in_bad_fork()
    out["initialized"] = torch.neuron.is_initialized()
    os.write(conn_w, json.dumps(out).encode())
    os._exit(0)


def fork_and_collect(calls):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        in_child(w, calls)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def main():
    report = {}
    # Forking before the runtime starts is fine: the child initialises its own.
    report["before_init"] = fork_and_collect(
        [("use", lambda: torch.ones(3, device="neuron").sum().item())])

    x = torch.arange(5.0, device="neuron")
    report["after_init"] = fork_and_collect([
        ("empty", lambda: torch.empty(1, device="neuron")),
        ("compute", lambda: (x + 1).cpu()),
        ("to_cpu", lambda: x.cpu()),
        ("init", torch.neuron.init),
        ("synchronize", torch.neuron.synchronize),
    ])
    report["parent_after_fork"] = (x * 3).cpu().tolist()

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=child_uses_neuron, args=(queue,))
    p.start()
    report["spawn_result"] = queue.get(timeout=60)
    p.join(60)
    report["spawn_exitcode"] = p.exitcode
    print(json.dumps(report))


if __name__ == "__main__":
    main()
"""


def test_fork_after_init_raises_naming_spawn(python_subprocess, tmp_path):
    # A file, not -c: the spawn child re-imports it to find its target function.
    script = tmp_path / "fork_report.py"
    script.write_text(FORK_REPORT)
    code = f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    r = run_json(python_subprocess, code, {})

    assert r["before_init"]["use"] is None
    assert r["before_init"]["bad_fork"] is False

    child = r["after_init"]
    for call in ("empty", "compute", "to_cpu", "init", "synchronize"):
        message = child[call]
        assert message is not None, f"{call} worked in a child forked after init"
        assert "'spawn'" in message, (call, message)
        assert "fork" in message, (call, message)
    assert child["cpu"] is True
    assert child["bad_fork"] is True
    assert child["initialized"] is False

    assert r["parent_after_fork"] == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert r["spawn_result"] == [0.0, 2.0, 4.0, 6.0]
    assert r["spawn_exitcode"] == 0

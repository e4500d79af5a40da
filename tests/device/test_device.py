"""torch.neuron's device surface and torch.accelerator on neuron: availability, lazy init,
current device, properties, placement, cross-device copies and autoload.

Runs in the default simulated instance (trn2.3xlarge, LNC=2: 4 devices of 24 GiB). Checks that
need a fresh interpreter (lazy init, autoload) run in a subprocess."""

import json

import pytest
import torch

import torch_neuronx

pytestmark = pytest.mark.filterwarnings("ignore:Operator .* executed via CPU fallback")

GiB = 1024**3
QUIET = {"TORCH_NEURONX_FALLBACK_WARN": "0"}
# The default topology, whatever the calling shell has set.
DEFAULT_ENV = {
    **QUIET,
    "NRTSIM_INSTANCE": "",
    "NEURON_LOGICAL_NC_CONFIG": "",
    "NEURON_RT_VISIBLE_CORES": "",
    "NEURON_RT_NUM_CORES": "",
    "NRTSIM_HBM_BYTES": "",
}


def run_json(python_subprocess, code, env=None):
    """Runs `code` in a fresh interpreter; it prints one JSON object as its last line."""
    result = python_subprocess(code, env={**DEFAULT_ENV, **(env or {})})
    assert result.returncode == 0, f"subprocess failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _default_topology():
    if torch.neuron.device_count() != 4 or torch.neuron.topology()["instance"] != "trn2.3xlarge":
        pytest.skip("these checks expect the default instance (trn2.3xlarge, LNC=2)")


# --- availability and initialisation ---------------------------------------------------------


def test_is_available_and_device_count():
    assert torch.neuron.is_available() is True
    assert torch.neuron.device_count() == 4
    assert torch.accelerator.device_count() == 4
    assert torch_neuronx.device_count() == 4
    assert torch.accelerator.is_available()


def test_current_accelerator_is_neuron():
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator == torch.device("neuron")
    assert accelerator.type == "neuron"
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.device("neuron:1").type == "neuron" and torch.device("neuron:1").index == 1


def test_init_is_idempotent():
    torch.neuron.init()
    torch.neuron.init()
    assert torch.neuron.is_initialized()
    assert torch_neuronx.is_neuron_runtime_initialized()
    assert not torch.neuron._is_in_bad_fork()


def test_lazy_init_in_fresh_process(python_subprocess):
    out = run_json(
        python_subprocess,
        """
        import json, sys
        import torch
        r = {"autoloaded": "torch_neuronx" in sys.modules, "has_module": hasattr(torch, "neuron")}
        r["available"] = torch.neuron.is_available()
        r["count"] = torch.neuron.device_count()
        # Neither is_available() nor device_count() may start the runtime.
        r["init_after_queries"] = torch.neuron.is_initialized()
        import torch_neuronx
        r["rt_after_queries"] = torch_neuronx.is_neuron_runtime_initialized()
        x = torch.arange(5.0, device="neuron")
        r["init_after_tensor"] = torch.neuron.is_initialized()
        r["sum"] = x.sum().item()
        print(json.dumps(r))
        """,
    )
    assert out == {
        "autoloaded": True,
        "has_module": True,
        "available": True,
        "count": 4,
        "init_after_queries": False,
        "rt_after_queries": False,
        "init_after_tensor": True,
        "sum": 10.0,
    }


def test_is_initialized_after_runtime_started_from_cpp(python_subprocess):
    # torch.Stream(device="neuron") reaches the runtime through the guard, not through
    # torch.neuron._lazy_init; is_initialized() must still say the runtime is up.
    out = run_json(
        python_subprocess,
        """
        import json
        import torch
        before = torch.neuron.is_initialized()
        s = torch.Stream(device="neuron:1")
        print(json.dumps({"before": before, "after": torch.neuron.is_initialized(),
                          "stream_device": s.device_index}))
        """,
    )
    assert out == {"before": False, "after": True, "stream_device": 1}


def test_autoload_makes_import_torch_enough(python_subprocess):
    out = run_json(
        python_subprocess,
        """
        import json
        import torch
        a = torch.arange(6.0).reshape(2, 3)
        n = a.to("neuron")
        r = {"device": str(n.device), "values": (n * 2).cpu().tolist(),
             "accelerator": str(torch.accelerator.current_accelerator())}
        print(json.dumps(r))
        """,
    )
    assert out == {
        "device": "neuron:0",
        "values": [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]],
        "accelerator": "neuron",
    }


def test_autoload_disabled_until_import(python_subprocess):
    out = run_json(
        python_subprocess,
        """
        import json, sys
        import torch
        r = {"loaded": "torch_neuronx" in sys.modules, "has_module": hasattr(torch, "neuron"),
             "backend_name": torch._C._get_privateuse1_backend_name()}
        try:
            torch.empty(1, device="neuron")
            r["error"] = None
        except RuntimeError as e:
            r["error"] = str(e)
        import torch_neuronx
        r["after_import"] = torch.ones(3, device="neuron").sum().item()
        r["has_module_after"] = hasattr(torch, "neuron")
        print(json.dumps(r))
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert out["loaded"] is False
    assert out["has_module"] is False
    assert out["backend_name"] == "privateuseone"
    assert out["error"] is not None and "neuron" in out["error"]
    assert out["after_import"] == 3.0
    assert out["has_module_after"] is True


def test_privateuse1_taken_by_another_backend(python_subprocess):
    out = run_json(
        python_subprocess,
        """
        import json
        import torch
        torch.utils.rename_privateuse1_backend("otherdev")
        try:
            import torch_neuronx
            error = None
        except RuntimeError as e:
            error = str(e)
        print(json.dumps({"error": error, "has_module": hasattr(torch, "neuron")}))
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert out["error"] is not None
    assert "'otherdev'" in out["error"] and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in out["error"]
    assert out["has_module"] is False


# --- current device ---------------------------------------------------------------------------


def test_set_device_and_current_device():
    torch.neuron.set_device(1)
    assert torch.neuron.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    assert torch.empty(2, device="neuron").device == torch.device("neuron:1")
    torch.neuron.set_device("neuron:2")
    assert torch.neuron.current_device() == 2
    torch.neuron.set_device(torch.device("neuron", 3))
    assert torch.neuron.current_device() == 3
    assert torch.zeros(2, device="neuron").device.index == 3
    torch.neuron.set_device(0)
    assert torch.neuron.current_device() == 0


def test_current_device_is_per_thread():
    import threading

    seen = {}

    def worker():
        seen["start"] = torch.neuron.current_device()
        torch.neuron.set_device(3)
        seen["tensor"] = torch.ones(1, device="neuron").device.index

    torch.neuron.set_device(1)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"start": 0, "tensor": 3}  # a new thread starts on neuron:0, as with CUDA
    assert torch.neuron.current_device() == 1  # and its set_device stays in that thread
    torch.neuron.set_device(0)


def test_accelerator_set_device_index():
    torch.accelerator.set_device_index(2)
    assert torch.neuron.current_device() == 2
    assert torch.accelerator.current_device_index() == 2
    assert torch.ones(1, device="neuron").device.index == 2
    torch.accelerator.set_device_index(0)
    assert torch.neuron.current_device() == 0


def test_device_context_manager_restores():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device.index == 1
        with torch.neuron.device("neuron:3"):
            assert torch.neuron.current_device() == 3
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0

    with torch.neuron.device(None):  # no-op, like torch.cuda.device(None)
        assert torch.neuron.current_device() == 0

    with pytest.raises(ZeroDivisionError):
        with torch.neuron.device(torch.device("neuron:2")):
            assert torch.neuron.current_device() == 2
            raise ZeroDivisionError
    assert torch.neuron.current_device() == 0


def test_accelerator_device_index_context():
    with torch.accelerator.device_index(2):
        assert torch.neuron.current_device() == 2
        assert torch.empty(1, device="neuron").device.index == 2
    assert torch.neuron.current_device() == 0


def test_device_of():
    t = torch.ones(2, device="neuron:2")
    with torch.neuron.device_of(t):
        assert torch.neuron.current_device() == 2
    with torch.neuron.device_of(torch.ones(2)):  # CPU tensor: no change
        assert torch.neuron.current_device() == 0
    assert torch.neuron.current_device() == 0


# --- properties -------------------------------------------------------------------------------


def test_device_properties():
    props = torch.neuron.get_device_properties(0)
    assert props.name == "trn2.3xlarge"
    assert props.total_memory == 24 * GiB
    assert props.chip == "Trainium2"
    assert props.logical_nc_config == 2
    for i in range(4):
        p = torch.neuron.get_device_properties(i)
        assert p.logical_core_id == i
        assert p.physical_cores == (2 * i, 2 * i + 1)
        assert p.total_memory == 24 * GiB
    assert torch.neuron.get_device_properties("neuron:1").logical_core_id == 1
    assert torch.neuron.get_device_properties(torch.device("neuron", 3)).logical_core_id == 3
    # Index-less: the current device.
    with torch.neuron.device(2):
        assert torch.neuron.get_device_properties().logical_core_id == 2
    assert "trn2.3xlarge" in repr(props) and "24576MB" in repr(props)


def test_device_name_and_capability():
    # TorchNeuron's names: the device string; the instance type is in the properties.
    assert torch.neuron.get_device_name() == "neuron:0"
    assert torch.neuron.get_device_name(3) == "neuron:3"
    assert torch.neuron.get_device_properties(3).name == "trn2.3xlarge"
    assert torch.neuron.get_device_capability() == (3, 0)  # NeuronCore-v3 (Trainium2)
    assert torch.neuron.get_device_capability("neuron:1") == (3, 0)


def test_accelerator_device_capability():
    dtypes = torch.accelerator.get_device_capability("neuron:1")["supported_dtypes"]
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.bool):
        assert dtype in dtypes
        # Each listed dtype really can be allocated and round-tripped.
        values = torch.tensor([0, 1, 1, 0]).to(dtype)
        assert torch.equal(values.to("neuron:1").cpu(), values)
    assert torch.qint8 not in dtypes  # no quantized backend


def test_bad_property_index():
    with pytest.raises(ValueError, match=r"^Device index 7 is out of range\. Valid range is 0 to 3 "
                       r"for this process.*4 NeuronCore device"):
        torch.neuron.get_device_properties(7)


def test_bf16_and_amp_dtypes():
    assert torch.neuron.is_bf16_supported() is True
    assert torch.neuron.get_amp_supported_dtype() == [torch.float32, torch.float16, torch.bfloat16]
    x = torch.tensor([1.5, -2.25, 3.0])
    assert torch.equal(x.to(torch.bfloat16).neuron().cpu(), x.to(torch.bfloat16))


def test_synchronize_variants_keep_results():
    a = torch.randn(64, 64)
    n = a.to("neuron")
    result = n @ n
    torch.neuron.synchronize()
    torch.neuron.synchronize(1)
    torch.neuron.synchronize("neuron:2")
    torch.neuron.synchronize(torch.device("neuron:3"))
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)
    torch_neuronx.synchronize()
    torch.testing.assert_close(result.cpu(), a @ a)


# --- tensors and modules ----------------------------------------------------------------------


def test_tensor_neuron_and_is_neuron():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    n = x.neuron()
    assert n.device == torch.device("neuron:0")
    assert n.is_neuron and not x.is_neuron
    assert torch.equal(n.cpu(), x)
    n1 = x.neuron(1)
    assert n1.device == torch.device("neuron:1")
    assert torch.equal(n1.cpu(), x)
    assert n.neuron() is n  # already there: no copy
    assert torch.equal(x.neuron("neuron:2").cpu(), x) and x.neuron("neuron:2").device.index == 2


def test_module_neuron_forward_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    expected = model(x)
    model.neuron()
    assert all(p.device == torch.device("neuron:0") for p in model.parameters())
    torch.testing.assert_close(model(x.neuron()).cpu(), expected)
    model.neuron(1)
    assert all(p.device == torch.device("neuron:1") for p in model.parameters())
    torch.testing.assert_close(model(x.neuron(1)).cpu(), expected)


def test_placement_on_neuron1():
    a = torch.arange(6.0).reshape(2, 3)
    n = torch.tensor([[0.0, 1, 2], [3, 4, 5]], device="neuron:1")
    assert n.device == torch.device("neuron:1")
    assert torch.ones(2, 3, device=torch.device("neuron", 1)).device.index == 1
    out = n * 2 + 1
    assert out.device == torch.device("neuron:1")  # results stay on the inputs' device
    assert torch.equal(out.cpu(), a * 2 + 1)
    assert torch.neuron.current_device() == 0  # placing on neuron:1 does not switch devices


def test_index_less_device_follows_current_device():
    with torch.neuron.device(3):
        t = torch.arange(4, device="neuron")
        assert t.device == torch.device("neuron:3")
        assert torch.equal(t.cpu(), torch.arange(4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_cross_device_copy_matches_cpu(dtype):
    torch.manual_seed(1)
    cpu = (torch.randn(17, 9) * 10).to(dtype)
    n0 = cpu.to("neuron:0")
    n1 = n0.to("neuron:1")
    assert n1.device == torch.device("neuron:1")
    assert torch.equal(n1.cpu(), cpu)
    # Distinct memory: changing the copy leaves the source alone.
    n1.zero_()
    assert torch.equal(n0.cpu(), cpu)
    assert torch.count_nonzero(n1.cpu()) == 0


def test_cross_device_copy_strided_and_converting():
    cpu = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    n0 = cpu.to("neuron:0")
    # Non-contiguous source.
    assert torch.equal(n0.transpose(0, 2).to("neuron:1").cpu(), cpu.transpose(0, 2))
    assert torch.equal(n0[:, 1::2, ::3].to("neuron:2").cpu(), cpu[:, 1::2, ::3])
    # Conversion during the copy.
    assert torch.equal(n0.to("neuron:3", torch.float16).cpu(), cpu.to(torch.float16))
    # copy_ into an existing tensor on another device.
    dst = torch.empty(3, 4, 5, device="neuron:1")
    dst.copy_(n0)
    assert torch.equal(dst.cpu(), cpu)
    # Round trip through every device.
    t = n0
    for i in (1, 2, 3, 0):
        t = t.to(f"neuron:{i}")
    assert t.device.index == 0 and torch.equal(t.cpu(), cpu)

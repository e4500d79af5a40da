"""The nki package stands alone: it has its own binding to the interpreter (nki._nki), runs
kernels on NumPy arrays without torch or torch_neuronx, and its modules import each other in one
direction only (_core <- _ops <- isa <- language <- _jit). torch_neuronx depends on nki (it
registers the neuron device with it), never the reverse."""

import ast
import os
import subprocess
import sys

import nki

PKG = os.path.dirname(nki.__file__)
ORDER = ["_core", "_ops", "isa", "language", "typing", "collectives", "_jit"]


def _imports(module):
    tree = ast.parse(open(os.path.join(PKG, module + ".py")).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for n in names:
            parts = n.split(".")
            if parts[0] == "torch_neuronx":
                found.add("torch_neuronx")
            if parts[0] == "nki" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_modules_import_downwards_only():
    for i, module in enumerate(ORDER):
        later = set(ORDER[i + 1:]) | {"torch_neuronx"}
        assert not (_imports(module) & later), f"nki/{module}.py imports {_imports(module) & later}"


def test_kernels_run_without_torch():
    code = (
        "import sys, numpy as np\n"
        "import nki, nki.language as nl\n"
        "@nki.jit\n"
        "def k(a):\n"
        "    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, nl.exp(nl.load(a)))\n"
        "    return out\n"
        "a = np.zeros((128, 8), np.float32)\n"
        "assert (k(a) == 1).all() and k.last_run.makespan_ns > 0\n"
        "assert 'torch' not in sys.modules and 'torch_neuronx' not in sys.modules, sorted(\n"
        "    m for m in sys.modules if m.startswith('torch'))\n"
        "print('ok')\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_torch_neuronx_registers_the_neuron_device():
    import torch_neuronx  # noqa: F401
    from nki import _jit

    assert "neuron" in _jit._DEVICES

"""The kernel checker's tile limits come from the hardware data file (neuron_cores.ini's tile
geometry, runtime/TensorTiles.h), the file the runtime's core model and the op-work table read:
the same figures as torch_neuronx.core_model()["tiles"], and a copy of the file with another
figure moves nki's limit with it (nothing restated in nki/)."""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import torch_neuronx
from nki import _core

DATA = pathlib.Path(torch_neuronx.__file__).parent / "data" / "neuron_cores.ini"


def test_limits_are_the_data_files_and_the_devices():
    tiles = torch_neuronx.core_model()["tiles"]
    assert _core.PMAX == tiles["tensor_partitions"]
    assert _core.STATIONARY_FMAX == tiles["tensor_stationary_columns"]
    assert _core.PSUM_BANK_BYTES == tiles["psum_bank_bytes"]
    assert _core.PSUM_BANKS == tiles["psum_banks"]
    chip = torch_neuronx.core_model()["neuroncore"]
    target = {"v2": "trn1", "v3": "trn2", "v4": "trn3"}[chip]
    assert _core.TARGETS[target]["sbuf_partition_bytes"] == tiles["sbuf_partition_bytes"]
    assert _core.TARGETS[target]["moving_fmax"] == tiles["tensor_moving_columns"]


def _with_edited_file(tmp_path, section, key, value, code):
    text = DATA.read_text()
    start = text.index(f"[{section}]")
    end = text.find("\n[", start + 1)
    end = len(text) if end < 0 else end
    part, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text[start:end])
    assert n == 1
    path = tmp_path / "cores.ini"
    path.write_text(text[:start] + part + text[end:])
    env = {**os.environ, "NRTSIM_ENGINE_MODEL": str(path)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_another_data_file_moves_the_limit(tmp_path):
    proc = _with_edited_file(tmp_path, "Trainium2", "sbuf_partition_bytes", 65536, """
        from nki import _core
        print(_core.TARGETS["trn2"]["sbuf_partition_bytes"], _core.TARGETS["trn1"]["sbuf_partition_bytes"])
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    trn1 = int(re.search(r"(?ms)^\[Trainium1\].*?^sbuf_partition_bytes = (\d+)", DATA.read_text())[1])
    assert proc.stdout.split() == ["65536", str(trn1)]


def test_a_constant_that_differs_between_targets_is_refused(tmp_path):
    proc = _with_edited_file(tmp_path, "Trainium3", "psum_banks", 16, "import nki")
    assert proc.returncode != 0
    assert "psum_banks differs between NeuronCore targets" in proc.stderr, proc.stderr[-2000:]

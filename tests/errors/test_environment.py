"""Configuration in one place per layer: every environment variable is parsed once, by the layer
that owns it (the runtime's csrc/runtime/Env, the Python layer's torch_neuronx/_env.py), and a
value it cannot take raises naming the variable, the value and what is accepted. Sizes take units
and refuse a bare number below 1 MiB; switches refuse words they do not know; a reversed core
range says so."""

import json
import pathlib
import re

import pytest

from torch_neuronx import _env

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / "torch_neuronx"

SWITCHES = sorted(name for name, v in _env.VARIABLES.items() if v.kind == "switch")


# --- the Python layer's variables --------------------------------------------------------------


@pytest.mark.parametrize("name", SWITCHES)
def test_switch_takes_the_switch_words_and_defaults_when_unset(monkeypatch, name):
    monkeypatch.delenv(name, raising=False)
    assert _env.switch(name) is _env.VARIABLES[name].default
    monkeypatch.setenv(name, "")
    assert _env.switch(name) is _env.VARIABLES[name].default
    for word in ("1", "true", "Yes", " ON "):
        monkeypatch.setenv(name, word)
        assert _env.switch(name) is True, word
    for word in ("0", "False", "no", "off"):
        monkeypatch.setenv(name, word)
        assert _env.switch(name) is False, word


@pytest.mark.parametrize("name", SWITCHES)
def test_switch_refuses_an_unknown_value_listing_the_words(monkeypatch, name):
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(ValueError) as raised:
        _env.switch(name)
    message = str(raised.value)
    assert f"{name}='maybe'" in message
    assert "1, true, yes, on" in message and "0, false, no, off" in message


def test_seconds_refuse_what_is_not_a_positive_number(monkeypatch):
    name = "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"
    monkeypatch.delenv(name, raising=False)
    assert _env.seconds(name) == 600.0
    monkeypatch.setenv(name, "2.5")
    assert _env.seconds(name) == 2.5
    for bad in ("soon", "0", "-3", "inf", "nan"):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=f"{name}='{bad}'.*positive number of seconds"):
            _env.seconds(name)


def test_lists_and_paths(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_PORTABILITY_IGNORE", " cpu_fallback, ,float64 ")
    assert _env.words("TORCH_NEURONX_PORTABILITY_IGNORE") == ("cpu_fallback", "float64")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", "~/somewhere")
    assert _env.path("TORCH_NEURONX_NEFF_CACHE_DIR") == str(pathlib.Path.home() / "somewhere")
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", "")
    assert _env.path("TORCH_NEURONX_NEFF_CACHE_DIR") is None


def test_an_undeclared_variable_is_a_programming_error():
    with pytest.raises(KeyError, match="not a declared switch"):
        _env.switch("TORCH_NEURONX_NO_SUCH_SWITCH")
    with pytest.raises(KeyError):
        _env.switch("TORCH_NEURONX_NEFF_CACHE_DIR")  # declared, as a path


def test_the_compile_switches_raise_on_an_unknown_value(monkeypatch):
    import torch

    monkeypatch.setenv("TORCH_NEURONX_STATIC_SHAPES", "sometimes")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="TORCH_NEURONX_STATIC_SHAPES='sometimes'"):
        torch.compile(lambda x: x + 1, backend="neuron")(torch.ones(2, device="neuron"))
    torch._dynamo.reset()


# --- one place per layer -------------------------------------------------------------------------

_PY_READ = re.compile(r"os\.getenv\(|os\.environ\.get\(|os\.environ\[[^\]]+\](?!\s*=[^=])"
                      r"|in os\.environ|os\.environ\.(?:items|keys|copy)\(")


def test_no_python_module_reads_the_environment_but_env_py():
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_env.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _PY_READ.search(line.split("#", 1)[0]):
                readers.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not readers, "read the environment through torch_neuronx._env:\n" + "\n".join(readers)


def test_no_cpp_file_calls_getenv_but_the_runtimes_env():
    readers = []
    for path in sorted((REPO / "csrc").rglob("*")):
        if path.suffix not in (".cpp", ".h") or path.name in ("Env.cpp",):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(secure_)?getenv\s*\(", line.split("//", 1)[0]):
                readers.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not readers, "read the environment through nrtsim::env (csrc/runtime/Env):\n" + \
        "\n".join(readers)


# --- the runtime's variables, as a user meets them -----------------------------------------------

DEVICE_REPORT = r"""
import json, torch
r = {"available": torch.neuron.is_available()}
try:
    torch.empty(1, device="neuron")
    r["error"] = None
    r["total_memory"] = torch.neuron.get_device_properties(0).total_memory
except RuntimeError as e:
    r["error"] = str(e)
print(json.dumps(r))
"""

BLANK = {"NRTSIM_INSTANCE": "", "NEURON_LOGICAL_NC_CONFIG": "", "NEURON_RT_VISIBLE_CORES": "",
         "NEURON_RT_NUM_CORES": "", "NRTSIM_HBM_BYTES": "", "TORCH_NEURONX_FALLBACK_WARN": "0"}


def device_report(python_subprocess, **env):
    result = python_subprocess(DEVICE_REPORT, env={**BLANK, **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("value, expected", [("512MiB", 512 << 20), ("2GiB", 2 << 30),
                                             ("1073741824", 1 << 30)])
def test_hbm_size_takes_units(python_subprocess, value, expected):
    r = device_report(python_subprocess, NRTSIM_HBM_BYTES=value)
    assert r["error"] is None and r["total_memory"] == expected


def test_hbm_size_refuses_a_bare_number_below_one_mib(python_subprocess):
    r = device_report(python_subprocess, NRTSIM_HBM_BYTES="512")
    assert r["available"] is False
    for part in ("NRTSIM_HBM_BYTES='512'", "bare number below 1 MiB", "'512MiB'"):
        assert part in r["error"], r["error"]


def test_a_reversed_core_range_says_so(python_subprocess):
    r = device_report(python_subprocess, NEURON_RT_VISIBLE_CORES="9-3")
    assert r["available"] is False
    for part in ("NEURON_RT_VISIBLE_CORES='9-3'", "reversed", "'3-9'"):
        assert part in r["error"], r["error"]


FALLBACK = r"""
import torch
x = torch.randn(4, device="neuron")
for attempt in range(2):
    try:
        torch.i0(x)
        print("RAN")
    except RuntimeError as e:
        print("ERROR", e)
"""


def test_an_unknown_fallback_warning_switch_raises(python_subprocess):
    result = python_subprocess(FALLBACK, env={"TORCH_NEURONX_FALLBACK_WARN": "maybe"})
    assert result.returncode == 0, result.stderr
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    # Raised at each fallback until the value is fixed (not only the first time).
    assert len(errors) == 2, result.stdout
    assert "TORCH_NEURONX_FALLBACK_WARN='maybe'" in errors[0]
    assert "0, false, no, off" in errors[0]

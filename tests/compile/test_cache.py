"""The persistent program cache (TorchNeuron's NEFF cache, torch_neuronx/dynamo/program_cache.py):
hit after a restart (programs and the graph entry that lets a restart skip AOTAutograd), a
corrupted or truncated entry rebuilt and reported, two processes compiling into one directory at
once, the switch-off variable, the lock timeout, and torch.compiler's save_cache_artifacts() /
load_cache_artifacts() round trip.

Each test uses its own empty cache directory (tmp_path); Inductor's kernel cache stays the
suite's shared one, so a "miss" here is quick when the kernels were built before.

Numbers: a program loaded from the cache is the same code as the one compiled, so its results are
compared bit for bit with the compiling run's; those are compared with eager neuron with the
float32 reordering bound of test_compile.py.
"""

import json
import pathlib
import subprocess
import sys
import textwrap
import warnings

import filelock
import pytest
import torch

from torch_neuronx.dynamo import program_cache

EPS = torch.finfo(torch.float32).eps

# A training step (forward and backward programs) compiled and run eagerly on the same inputs.
_STEP = """
import json, torch
from torch._dynamo.utils import counters
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                            torch.nn.Linear(16, 4)).to("neuron")
x = torch.randn(5, 8, device="neuron")

def step(fn):
    model.zero_grad()
    loss = fn(x).square().mean()
    loss.backward()
    return [loss.detach()] + [p.grad.detach().clone() for p in model.parameters()]

torch.neuron.reset_dynamo_metrics()
compiled = step(torch.compile(model, backend="neuron"))
metrics = torch.neuron.get_dynamo_metrics()
eager = step(model)
print(json.dumps({
    "values": [t.cpu().flatten().tolist() for t in compiled],
    "worst": max((c - e).abs().max().item() for c, e in zip(compiled, eager)),
    "metrics": {k: metrics[k] for k in ("programs", "compiles", "cache_hits", "cache_misses",
                                        "cache_corrupted", "cpp_wrapper_programs",
                                        "direct_cpp_programs")},
    "graph_hits": counters["aot_autograd"]["autograd_cache_hit"],
}))
"""

# Longest float32 accumulation in the step: the 16-term reduction of the second Linear (the
# gradient reductions over the batch of 5 and the mean's 20 terms are shorter or comparable).
_BOUND = 2 * 20 * EPS * 4.0


def _run_step(cache_dir, extra_env=None, wait=True):
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(cache_dir), **(extra_env or {})}
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_STEP)],
        env={**__import__("os").environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return process
    return _result(process)


def _result(process):
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _entries(cache_dir):
    return sorted(pathlib.Path(cache_dir).glob("*/*.neff"))


def _graph_entries(cache_dir):
    return sorted(pathlib.Path(cache_dir).glob("*/*.graph"))


def test_hit_after_restart(tmp_path):
    first = _run_step(tmp_path)
    assert first["metrics"]["cache_misses"] == first["metrics"]["programs"] == 2, first
    assert first["worst"] <= _BOUND
    assert len(_entries(tmp_path)) == 2  # forward and backward program

    assert len(_graph_entries(tmp_path)) == 1  # the Dynamo graph's AOTAutograd result
    assert first["graph_hits"] == 0

    second = _run_step(tmp_path)
    assert second["metrics"]["cache_hits"] == 2, second
    assert second["metrics"]["compiles"] == 0 and second["metrics"]["cache_misses"] == 0
    # The restart took the graph entry: no AOTAutograd trace or partition, programs loaded.
    assert second["graph_hits"] == 1, second
    assert second["values"] == first["values"]  # the same programs, bit for bit
    # Loaded programs are launched as compiled ones are: their C++ wrapper called directly.
    for run in (first, second):
        m = run["metrics"]
        assert m["direct_cpp_programs"] == m["cpp_wrapper_programs"] == 2, run


def test_two_processes_compile_into_one_directory(tmp_path):
    processes = [_run_step(tmp_path, wait=False) for _ in range(2)]
    results = [_result(p) for p in processes]
    # Each program is compiled by exactly one of them: the other waits on the entry's lock and
    # loads it (or finds it already written).
    assert sum(r["metrics"]["compiles"] for r in results) == 2, results
    assert sum(r["metrics"]["cache_hits"] for r in results) == 2, results
    assert results[0]["values"] == results[1]["values"]
    assert all(r["worst"] <= _BOUND for r in results)
    for entry in _entries(tmp_path):
        program_cache.decode_entry(entry.read_bytes())  # complete, checksum-valid entries
    assert not list(pathlib.Path(tmp_path).glob("*/.*.tmp"))  # no temporary files left


# In-process tests: the cache directory is read from the environment at each compile.

def _in_process_step(model, x):
    model.zero_grad()
    loss = torch.compile(model, backend="neuron")(x).square().mean()
    loss.backward()
    return [loss.detach().cpu()] + [p.grad.detach().cpu().clone() for p in model.parameters()]


def _model_and_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 4)).to("neuron")
    return model, torch.randn(5, 8, device="neuron")


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "garbage"])
def test_corrupted_entry_is_reported_and_rebuilt(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    model, x = _model_and_input()
    reference = _in_process_step(model, x)
    entries = _entries(tmp_path)
    assert len(entries) == 2
    for entry in entries:
        content = bytearray(entry.read_bytes())
        if damage == "truncate":
            content = content[: len(content) // 2]
        elif damage == "flip_byte":
            content[-100] ^= 0xFF
        else:
            content = bytearray(b"not an entry")
        entry.write_bytes(bytes(content))

    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    with pytest.warns(UserWarning, match="program cache entry .* is corrupted"):
        rebuilt = _in_process_step(model, x)
    m = torch.neuron.get_dynamo_metrics()
    assert m["cache_corrupted"] == 2 and m["cache_misses"] == 2 and m["cache_hits"] == 0, m
    for a, b in zip(rebuilt, reference):
        assert torch.equal(a, b)
    for entry in _entries(tmp_path):  # rewritten whole
        program_cache.decode_entry(entry.read_bytes())

    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _in_process_step(model, x)
    assert torch.neuron.get_dynamo_metrics()["cache_hits"] == 2


def test_corrupted_graph_entry_is_reported_and_rebuilt(tmp_path, monkeypatch):
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    model, x = _model_and_input()
    reference = _in_process_step(model, x)
    (graph_entry,) = _graph_entries(tmp_path)
    content = bytearray(graph_entry.read_bytes())
    content[-50] ^= 0xFF
    graph_entry.write_bytes(bytes(content))

    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    counters.clear()
    with pytest.warns(UserWarning, match=r"cache entry .*\.graph is corrupted"):
        rebuilt = _in_process_step(model, x)
    m = torch.neuron.get_dynamo_metrics()
    # Only the graph is traced again: its programs come from their intact entries.
    assert m["cache_corrupted"] == 1 and m["cache_hits"] == 2 and m["compiles"] == 0, m
    assert counters["aot_autograd"]["autograd_cache_hit"] == 0
    for a, b in zip(rebuilt, reference):
        assert torch.equal(a, b)
    (graph_entry,) = _graph_entries(tmp_path)
    program_cache.decode_entry(graph_entry.read_bytes(), field="aot_result")  # rewritten whole

    torch._dynamo.reset()
    counters.clear()
    _in_process_step(model, x)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1


def test_program_names_and_legality_follow_a_loaded_graph(tmp_path, monkeypatch):
    """Programs loaded with a graph entry are named after the graph that loads them, and their
    Trainium findings are reported again, as for a program compiled in this process."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))

    def widened(t):
        return (t.double() * 3).float()

    x = torch.arange(4.0, device="neuron")
    with pytest.warns(UserWarning, match="float64"):
        first = torch.compile(widened, backend="neuron", options={"model_name": "m1"})(x)
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    counters.clear()
    with pytest.warns(UserWarning, match="float64"):
        second = torch.compile(widened, backend="neuron", options={"model_name": "m1"})(x)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1
    assert torch.equal(first.cpu(), second.cpu())
    m = torch.neuron.get_dynamo_metrics()
    (entry,) = m["trainium_legality"]
    assert entry["program"].startswith("neuron::program/m1_")
    assert entry["issues"]["float64"]["count"] >= 2
    assert m["cache_hits"] == 1 and m["compiles"] == 0


def test_disabled_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    model, x = _model_and_input()
    _in_process_step(model, x)
    assert torch.neuron.get_dynamo_metrics()["programs"] == 2
    assert list(tmp_path.iterdir()) == []


def test_lock_timeout_compiles_without_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "0.2")
    model, x = _model_and_input()
    reference = _in_process_step(model, x)
    # Another process holding every entry's lock (as if compiling): this one gives up waiting.
    locks = [filelock.FileLock(str(e) + ".lock") for e in _entries(tmp_path)]
    for entry in _entries(tmp_path):
        entry.unlink()
    for lock in locks:
        lock.acquire()
    try:
        torch._dynamo.reset()
        torch.neuron.reset_dynamo_metrics()
        with pytest.warns(UserWarning, match="TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"):
            result = _in_process_step(model, x)
    finally:
        for lock in locks:
            lock.release()
    assert torch.neuron.get_dynamo_metrics()["cache_lock_timeouts"] == 2
    for a, b in zip(result, reference):
        assert torch.equal(a, b)
    assert len(_entries(tmp_path)) == 2  # written anyway (atomically)


def test_bad_lock_timeout_names_the_variable(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"):
        program_cache.lock_timeout()


def test_default_directory_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert program_cache.cache_dir() == tmp_path.resolve() / "torch_neuronx" / "neff"


def test_save_and_load_cache_artifacts_round_trip(tmp_path, monkeypatch):
    from torch.compiler._cache import CacheArtifactManager

    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(first))
    CacheArtifactManager.clear()
    model, x = _model_and_input()
    reference = _in_process_step(model, x)
    artifacts, info = torch.compiler.save_cache_artifacts()
    assert len(info.neuron_neff_artifacts) == 2
    assert len(info.neuron_graph_artifacts) == 1
    assert not info.aot_autograd_artifacts  # a neuron graph never goes to Inductor's cache

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(second))
    torch.compiler.load_cache_artifacts(artifacts)
    assert [e.name for e in _entries(second)] == [e.name for e in _entries(first)]
    assert [e.name for e in _graph_entries(second)] == [e.name for e in _graph_entries(first)]
    torch._dynamo.reset()
    torch.neuron.reset_dynamo_metrics()
    result = _in_process_step(model, x)
    assert torch.neuron.get_dynamo_metrics()["cache_hits"] == 2
    for a, b in zip(result, reference):
        assert torch.equal(a, b)

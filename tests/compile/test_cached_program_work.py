"""A program loaded from the program cache carries the work it carried when it was compiled: the
same launch record, engine by engine and byte by byte, in the compiling process and in a restart
that loads every program (torch_neuronx/dynamo/program_work.py asks the op-work table again on
load). Before, the compile counted each op under the compile's FakeTensorMode and the load on
plain meta tensors, where copy_'s composite copies nothing: a cached cast or clone lost its DMA
bytes.

The graphs: a dtype cast and back, a clone made contiguous after a transpose (two copies), a
lifted host constant (torch.tensor(2.0): host work, no launch), and a small training step
(forward and backward programs)."""

import json
import os
import subprocess
import sys
import textwrap

_RUN = """
import json, torch, torch_neuronx

dev = torch.device("neuron")
x = torch.randn(8, 8, device=dev)

def cast(x):
    return x.to(torch.bfloat16).float() * 0.5

def copies(x):
    return x.clone().t().contiguous()

def constant(x):
    return x * torch.tensor(2.0) + 1

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dev)

def step(x):
    model(x).square().mean().backward()

records = {}
torch.neuron.reset_dynamo_metrics()
for name, fn in (("cast", cast), ("copies", copies), ("constant", constant), ("step", step)):
    compiled = torch.compile(fn, backend="neuron")
    compiled(x)  # compiles or loads
    torch_neuronx.clear_kernel_trace()
    compiled(x)
    records[name] = [{k: r[k] for k in ("op", "ops", "bytes_read", "bytes_written", "engine_bytes")}
                     for r in torch_neuronx.kernel_trace() if r["kind"] == "program"]
metrics = torch.neuron.get_dynamo_metrics()
print(json.dumps({"records": records,
                  "metrics": {k: metrics[k] for k in ("compiles", "cache_hits")}}))
"""


def _run(cache_dir):
    env = {**os.environ, "TORCH_NEURONX_NEFF_CACHE_DIR": str(cache_dir)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_RUN)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_cached_program_records_the_work_of_the_compiled_one(tmp_path):
    compiled = _run(tmp_path)
    loaded = _run(tmp_path)
    assert compiled["metrics"]["compiles"] > 0
    assert loaded["metrics"]["compiles"] == 0 and loaded["metrics"]["cache_hits"] > 0, loaded
    assert loaded["records"] == compiled["records"]
    # The copies themselves (the op-work table's copy rule inside a program: each copy writes
    # its 8 x 8 float32 result once through the DMA engines); the host constant makes none.
    (copies,) = compiled["records"]["copies"]
    assert copies["engine_bytes"]["dma"] == [0, 2 * 8 * 8 * 4], copies
    (constant,) = compiled["records"]["constant"]
    assert constant["engine_bytes"]["dma"] == [0, 0], constant
    (cast,) = compiled["records"]["cast"]
    assert cast["engine_bytes"]["dma"][1] > 0, cast
    assert len(compiled["records"]["step"]) == 2  # forward and backward programs

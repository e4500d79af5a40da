"""Projecting a user's script: run it on neuron as it is, trace every ATen op it runs through the
same bridge as a model trace, and project the whole run as one step of one rank."""

from __future__ import annotations

import os
import sys

import torch

from torch_neuronx import _C


def estimate_script(path: str, *, instance: str, compare, tokens: float, compiled: bool,
                    data: str | None, prices: dict, run):
    from torch_neuronx.estimate import Estimate, Layout, Workload
    from torch_neuronx.estimate._project import Result, _reprice, data_paths
    from torch_neuronx.estimate._trace import _Recorder

    if not os.path.exists(path):
        raise ValueError(f"--script {path!r} does not exist")
    data_path, engine_path = data_paths(data)
    known = _C._estimate_instances(data_path, engine_path)
    for name in [instance, *compare]:
        if name not in known:
            raise ValueError(f"unknown instance {name!r}; the estimate data knows: {sorted(known)}")
    trace = _C._EstimateTrace()
    recorder = _Recorder(trace)
    recorder.phase = "script"
    recorder.trainable = {}
    argv = sys.argv
    sys.argv = [path]
    try:
        with recorder:
            run(path, run_name="__main__")
    finally:
        sys.argv = argv
    if len(trace) == 0:
        raise ValueError(f"the script {path!r} ran no ATen ops; nothing to project")
    # The parameters: the trainable leaf tensors the script's ops read (an inference script has
    # none the trace can tell apart from inputs: then they are reported as not known).
    params = int(sum(recorder.trainable.values()))
    targets = []
    for name in [instance, *compare]:
        projection = _C._estimate_project(
            trace, dict(layers=0, hidden=0, params_per_rank=float(params)), dict(tp=1, pp=1, dp=1),
            dict(phase="train", tokens_per_microbatch=float(tokens) if tokens > 0 else 1.0,
                 compiled=compiled),
            name, data_path, engine_path)
        if name in prices:
            _reprice(projection, prices[name])
        notes = ["one run of the script is one step of one rank (no parallel layout)"]
        if tokens <= 0:
            notes.append("--tokens not given: tokens/s and $ per 1M tokens count one token per run")
        targets.append(Result(name, Layout(), projection, trace_ops=len(trace),
                              unmodelled=dict(recorder.unmodelled), notes=notes, chosen="a script"))
    workload = Workload(kind="train", seq_len=int(tokens) if tokens > 0 else 1,
                        dtype=str(torch.get_default_dtype()).replace("torch.", ""), compiled=compiled)
    return Estimate(model=os.path.basename(path), params=params, workload=workload, targets=targets)

"""Projecting a user's script: run it on neuron as it is, trace every ATen op it runs through the
same bridge as a model trace, and project the whole run as one step of one rank."""

from __future__ import annotations

import os
import sys

import torch

from torch_neuronx import _C


def estimate_script(path: str, *, instance: str, compare, tokens: float, compiled: bool,
                    data: str | None, prices: dict, run):
    from torch_neuronx.estimate import Estimate, Layout, Target, _reprice, data_paths
    from torch_neuronx.estimate._trace import _Recorder

    if not os.path.exists(path):
        raise ValueError(f"--script {path!r} does not exist")
    data_path, engine_path = data_paths(data)
    known = _C._estimate_instances(data_path)
    for name in [instance, *compare]:
        if name not in known:
            raise ValueError(f"unknown instance {name!r}; the estimate data knows: {sorted(known)}")
    trace = _C._EstimateTrace()
    recorder = _Recorder(trace)
    recorder.phase = "script"
    argv = sys.argv
    sys.argv = [path]
    try:
        with recorder:
            run(path, run_name="__main__")
    finally:
        sys.argv = argv
    if len(trace) == 0:
        raise ValueError(f"the script {path!r} ran no ATen ops; nothing to project")
    targets = []
    for name in [instance, *compare]:
        projection = _C._estimate_project(
            trace, dict(layers=0, hidden=0, params_per_rank=0.0), dict(tp=1, pp=1, dp=1),
            dict(training=True, tokens_per_microbatch=float(tokens) if tokens > 0 else 1.0,
                 compiled=compiled),
            name, data_path, engine_path)
        if name in prices:
            _reprice(projection, prices[name])
        notes = ["one run of the script is one step of one rank (no parallel layout)"]
        if tokens <= 0:
            notes.append("--tokens not given: tokens/s and $ per 1M tokens count one token per run")
        targets.append(Target(name, Layout(), projection, len(trace), dict(recorder.unmodelled), notes))
    return Estimate(model=os.path.basename(path), params=0, workload="train", batch=1,
                    seq_len=int(tokens) if tokens > 0 else 1, context=0,
                    dtype=str(torch.get_default_dtype()).replace("torch.", ""), compiled=compiled,
                    targets=targets)

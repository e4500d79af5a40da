"""The fuzzer's session summary: what the examples did, the known failures they met, and which
registered neuron kernels no fuzzed call reached. Its compiled checks share tests/compile's
Inductor and neuron program caches under build/, so a second run loads what the first compiled."""

import os
import pathlib

import torch_neuronx  # noqa: F401

_BUILD = pathlib.Path(__file__).resolve().parents[2] / "build"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_BUILD / "inductor-cache"))
os.environ.setdefault("TORCH_NEURONX_NEFF_CACHE_DIR", str(_BUILD / "neff-cache"))


def pytest_terminal_summary(terminalreporter, config):
    from .catalogue import registered_overloads
    from .test_fuzz import EXAMPLES, Tally

    if not Tally.counts:
        return
    write = terminalreporter.write_line
    terminalreporter.section("layout fuzzer")
    write(f"seed {Tally.seed}, {EXAMPLES} examples per op")
    for what in sorted(Tally.counts):
        write(f"  {what}: {Tally.counts[what]}")
    for reason, count in sorted(Tally.known.items()):
        write(f"  known ({count}x): {reason}")
    registered = registered_overloads()
    reached = {f"aten::{name.removeprefix('aten::')}" for name in Tally.reached} & registered
    write(f"registered neuron kernels reached: {len(reached)} of {len(registered)}")
    if config.getoption("verbose") > 0:
        for name in sorted(registered - reached):
            write(f"  not reached: {name}")
    margin, where = Tally.largest_margin
    write(f"largest |neuron - cpu| as a fraction of its bound: {margin:.3g} ({where})")

"""PyTorch's device-generic test files as a conformance harness: each file runs once for neuron
(PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1) and once for the CPU, in this environment, and the
outcomes are compared per test. The CPU is the oracle: a test that passes on the CPU and fails
on neuron is a neuron defect unless tests/conformance/known_failures.txt explains it.

    python tests/conformance/suites.py                 # the three files in full (make conformance)
    python tests/conformance/suites.py --subset ci     # the CI subset (tests/conformance/test_*)
    python tests/conformance/suites.py --files test_view_ops.py --write-report

The files are PyTorch's own (v2.4.0, BSD-3), not part of this repository: they are read from
PYTORCH_TESTS (default ../shared/pytorch-tests beside the repository) and copied to
build/conformance before running, because pytest writes caches beside them. docs/conformance.md
describes the harness, the list and the counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SOURCE_VARIABLE = "PYTORCH_TESTS"
DEFAULT_SOURCE = REPO.parent / "shared" / "pytorch-tests"
KNOWN_FAILURES = HERE / "known_failures.txt"
DEVICES = {"cpu": "cpu", "neuron": "privateuse1"}

# Reason classes of the known-failures list: issue 27's three (version drift, by design with the
# TorchNeuron documentation that says the same, missing dtype), version drift in two kinds. Only
# version drift may be numerous: the files are PyTorch 2.4's and the pinned torch is 2.13.
REASON_CLASSES = {
    "version-drift": "fails on the CPU too: the 2.4 test no longer matches torch 2.13",
    "version-drift-skip": "version drift the CPU passes: torch 2.13's OpInfo skips the test on "
                          "every device under the class's new name, which PyTorch 2.4's file "
                          "does not have yet (checked against the installed torch)",
    "by-design": "neuron does what TorchNeuron does, as TorchNeuron's documentation or its own "
                 "CI's expected-failure lists say (the reason cites them)",
    "missing-dtype": "a dtype neuron does not compute",
}
DRIFT_CLASSES = ("version-drift", "version-drift-skip")
# torch 2.13's OpInfo database names the binary ufuncs' test class TestBinaryUfuncsDevice;
# PyTorch 2.4's file calls it TestBinaryUfuncs, so the skips 2.13 records do not reach it.
RENAMED_CLASSES = {"TestBinaryUfuncs": "TestBinaryUfuncsDevice"}
MAX_NON_DRIFT_ENTRIES = 30


@dataclasses.dataclass(frozen=True)
class Suite:
    file: str
    keyword: str | None = None  # pytest -k expression


FULL = (
    Suite("test_binary_ufuncs.py"),
    Suite("test_view_ops.py"),
    Suite("test_nn.py", "TestNNDeviceType"),
)

# A few minutes on both devices: the whole of test_view_ops (aliasing, views and their
# writes), and the parts of the other two that cover what this project fixed at the root:
# memory formats and channels-last kernels, memory-overlap checks, out= device checks, and a
# slice of the binary ufuncs across dtypes.
CI_SUBSET = (
    Suite("test_view_ops.py"),
    Suite("test_binary_ufuncs.py",
          "overlap or out_resize or test_add_ or test_mul_ or cpu_tensor or "
          "test_binary_ops_with_scalars or test_bitwise_shift or test_pow_ or "
          "(test_reference_numerics and float32 and (add or mul or sub or div))"),
    Suite("test_nn.py",
          "TestNNDeviceType and (channels_last or GroupNorm_memory_format or inplace_overlap or "
          "conv_empty_input or channel_shuffle or TransformerEncoderLayer_empty or "
          "(upsamplingBiMode2d_consistency and num_channels_3 and output_size_32 and "
          "batch_size_1) or (upsamplingBiMode2d_antialias and memory_format1) or "
          "(nonsupported_dtypes and uint8))"),
)

FAILED = {"failed", "error", "crashed", "collect_error"}
PASSED = {"passed", "xpassed"}


def source_dir() -> Path:
    return Path(os.environ.get(SOURCE_VARIABLE, DEFAULT_SOURCE)).resolve()


def missing_source_message() -> str:
    return (f"PyTorch's device-generic test files are not at {source_dir()}: set {SOURCE_VARIABLE} "
            f"to the folder holding test_binary_ufuncs.py, test_view_ops.py, test_nn.py and their "
            f"conftest.py (default: ../shared/pytorch-tests beside the repository)")


def normalize(nodeid: str) -> str:
    """One id for a test on either device: the device class suffix dropped (TestViewOpsCPU,
    TestViewOpsPRIVATEUSE1 -> TestViewOps) and the test name's device token (its last _cpu or
    _neuron) replaced by _DEVICE."""
    parts = nodeid.split("::")
    parts[0] = os.path.basename(parts[0])
    if len(parts) >= 3:
        parts[1] = re.sub(r"(PRIVATEUSE1|NEURON|CPU)$", "", parts[1])
        name = parts[2]
        matches = list(re.finditer(r"_(cpu|neuron)(?=_|$|\[)", name))
        if matches:
            m = matches[-1]
            name = name[: m.start()] + "_DEVICE" + name[m.end():]
        parts[2] = name
    return "::".join(parts)


# ---------------------------------------------------------------------------------------------
# Running one file on one device

def _pytest_command(suite: Suite, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", suite.file, "-q", "-p", "no:cacheprovider",
           "--rootdir", ".", "-c", os.devnull,
           "-p", "deselect_plugin", "-o", "addopts=", "--tb=short", "-rN"]
    if suite.keyword:
        cmd += ["-k", suite.keyword]
    return cmd + extra


def _env(device: str, results: Path, deselect: Path | None) -> dict:
    env = dict(os.environ)
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = DEVICES[device]
    env["PTS_RESULTS"] = str(results)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env.setdefault("TORCH_NEURONX_FALLBACK_WARN", "0")
    env["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"
    if deselect is not None:
        env["CONFORMANCE_DESELECT"] = str(deselect)
    return env


def _collect(suite: Suite, device: str, workdir: Path, results: Path) -> list[str]:
    proc = subprocess.run(_pytest_command(suite, ["--collect-only"]), cwd=workdir,
                          env=_env(device, results, None), capture_output=True, text=True)
    return [line.strip() for line in proc.stdout.splitlines() if "::" in line and " " not in line]


def _read_results(path: Path) -> dict[str, dict]:
    records = {}
    if path.exists():
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rec = json.loads(line)
                    records[rec["id"]] = rec
    return records


def run_suite(suite: Suite, device: str, workdir: Path, outdir: Path, timeout_s: int,
              log=print) -> dict[str, dict]:
    """Runs `suite` for `device`; returns node id -> record (outcome, msg, dur). A test that
    kills the interpreter is recorded as "crashed" and the run resumes after it."""
    stem = f"{Path(suite.file).stem}.{device}"
    results = outdir / f"{stem}.jsonl"
    deselect = outdir / f"{stem}.deselect"
    logfile = outdir / f"{stem}.log"
    for p in (results, deselect, logfile):
        p.unlink(missing_ok=True)
    collected = None
    extra = [f"--timeout={timeout_s}"] if timeout_s else []
    for attempt in range(200):
        t0 = time.time()
        with open(logfile, "a") as lf:
            proc = subprocess.run(_pytest_command(suite, extra), cwd=workdir,
                                  env=_env(device, results, deselect), stdout=lf,
                                  stderr=subprocess.STDOUT)
        records = _read_results(results)
        log(f"  {suite.file} [{device}] pytest exit {proc.returncode} after "
            f"{time.time() - t0:.0f}s, {len(records)} results")
        if proc.returncode in (0, 1, 5):
            return records
        # The interpreter died (or pytest stopped early): the first collected test without a
        # result is the one that was running.
        if collected is None:
            collected = _collect(suite, device, workdir, results)
        remaining = [i for i in collected if i not in records]
        if not remaining:
            return records
        crashed = remaining[0]
        with open(results, "a") as f:
            f.write(json.dumps({"id": crashed, "outcome": "crashed", "dur": 0.0,
                                "msg": [f"the interpreter died (pytest exit {proc.returncode})"]})
                    + "\n")
        with open(deselect, "w") as f:
            f.write("\n".join(list(records) + [crashed]) + "\n")
        log(f"  {suite.file} [{device}] {crashed} killed the interpreter; resuming after it")
    return _read_results(results)


# ---------------------------------------------------------------------------------------------
# The known-failures list

@dataclasses.dataclass
class Entry:
    test: str
    reason_class: str
    reason: str


def read_known_failures(path: Path = KNOWN_FAILURES) -> dict[str, Entry]:
    """Lines `<test id>  <class>  <reason>`, separated by tabs; # starts a comment line."""
    entries: dict[str, Entry] = {}
    if not path.exists():
        return entries
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or fields[1] not in REASON_CLASSES or not fields[2].strip():
            raise ValueError(f"{path}:{n}: expected '<test id>\\t<class>\\t<reason>' with class one "
                             f"of {sorted(REASON_CLASSES)}, got {line!r}")
        if fields[0] in entries:
            raise ValueError(f"{path}:{n}: {fields[0]} is listed twice")
        entries[fields[0]] = Entry(fields[0], fields[1], fields[2].strip())
    return entries


def opinfo_skips(test: str) -> bool:
    """True when the installed torch's OpInfo database skips (or expects to fail) this test on
    every device under its class's current name: a version-drift-skip entry must be one."""
    import unittest

    from torch.testing._internal.common_methods_invocations import op_db, python_ref_db

    parts = test.split("::")
    if len(parts) != 3 or parts[1] not in RENAMED_CLASSES or "_DEVICE" not in parts[2]:
        return False
    cls = RENAMED_CLASSES[parts[1]]
    name, _, dtype = parts[2].partition("_DEVICE")
    for op in list(op_db) + list(python_ref_db):
        for info in op.decorators:
            if getattr(info, "cls_name", None) != cls or info.device_type is not None or \
                    not info.active_if:
                continue
            if not any(d is unittest.expectedFailure or
                       getattr(d, "__qualname__", "").startswith("skip.")
                       for d in info.decorators):
                continue
            if info.test_name is not None and name != f"{info.test_name}_{op.formatted_name}":
                continue
            if info.test_name is None and not name.endswith(f"_{op.formatted_name}"):
                continue
            if info.dtypes and dtype.lstrip("_") not in {str(d).split(".")[-1]
                                                         for d in info.dtypes}:
                continue
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Comparing the two devices

def _kind(outcome: str | None) -> str:
    if outcome is None:
        return "absent"
    if outcome in PASSED:
        return "passed"
    if outcome in FAILED:
        return "failed"
    return "skipped"


@dataclasses.dataclass
class FileComparison:
    file: str
    counts: dict[str, Counter]              # device -> kind -> count
    cpu_pass_neuron_fail: list[str]         # normalized ids
    neuron_fail_cpu_fail: list[str]
    neuron_fail_other: list[str]            # neuron failed, CPU skipped or absent
    messages: dict[str, list[str]]          # normalized id -> neuron's error lines
    cpu_messages: dict[str, list[str]]


def compare(file: str, cpu: dict[str, dict], neuron: dict[str, dict]) -> FileComparison:
    by_device = {"cpu": {normalize(k): v for k, v in cpu.items()},
                 "neuron": {normalize(k): v for k, v in neuron.items()}}
    counts = {d: Counter(_kind(r["outcome"]) for r in recs.values())
              for d, recs in by_device.items()}
    cpf, nfcf, other, messages, cpu_messages = [], [], [], {}, {}
    for test, rec in sorted(by_device["neuron"].items()):
        if _kind(rec["outcome"]) != "failed":
            continue
        messages[test] = rec.get("msg", [])
        cpu_rec = by_device["cpu"].get(test)
        cpu_kind = _kind(cpu_rec["outcome"] if cpu_rec else None)
        if cpu_rec:
            cpu_messages[test] = cpu_rec.get("msg", [])
        if cpu_kind == "passed":
            cpf.append(test)
        elif cpu_kind == "failed":
            nfcf.append(test)
        else:
            other.append(test)
    return FileComparison(file, counts, cpf, nfcf, other, messages, cpu_messages)


@dataclasses.dataclass
class Verdict:
    unexplained: list[str]       # neuron fails, no entry
    misfiled_drift: list[str]    # listed as version drift but CPU passes
    stale: list[str]             # listed, ran, and neuron no longer fails
    used: dict[str, Entry]


def judge(comparisons: list[FileComparison], known: dict[str, Entry],
          ran: set[str]) -> Verdict:
    """`ran`: normalized ids of every test that ran on neuron (to tell stale entries from ones a
    subset did not reach)."""
    unexplained, misfiled, used = [], [], {}
    failing = set()
    for c in comparisons:
        for test in c.cpu_pass_neuron_fail + c.neuron_fail_cpu_fail + c.neuron_fail_other:
            key = test  # normalized ids start with the file name
            failing.add(key)
            entry = known.get(key)
            if entry is None:
                unexplained.append(key)
                continue
            used[key] = entry
            if entry.reason_class == "version-drift" and test in c.cpu_pass_neuron_fail:
                misfiled.append(key)
    stale = sorted(k for k in known if k in ran and k not in failing)
    return Verdict(sorted(unexplained), sorted(misfiled), stale, used)


# ---------------------------------------------------------------------------------------------
# Reports

def summary_table(comparisons: list[FileComparison]) -> str:
    lines = ["| file | device | passed | failed | skipped | CPU-pass / neuron-fail |",
             "|---|---|---:|---:|---:|---:|"]
    for c in comparisons:
        for device in ("neuron", "cpu"):
            k = c.counts[device]
            cpf = str(len(c.cpu_pass_neuron_fail)) if device == "neuron" else ""
            lines.append(f"| {c.file} | {device} | {k['passed']} | {k['failed']} | "
                         f"{k['skipped']} | {cpf} |")
    return "\n".join(lines)


def write_report(outdir: Path, comparisons: list[FileComparison], verdict: Verdict,
                 known: dict[str, Entry]) -> Path:
    report = outdir / "report.md"
    lines = ["# Conformance run", "", summary_table(comparisons), ""]
    by_class = Counter(e.reason_class for e in verdict.used.values())
    lines += ["Known failures used, by class: " +
              (", ".join(f"{k} {v}" for k, v in sorted(by_class.items())) or "none"), ""]
    for title, ids in (("Neuron failures without an entry", verdict.unexplained),
                       ("Entries filed as version drift whose test passes on the CPU",
                        verdict.misfiled_drift),
                       ("Stale entries (the test passes on neuron now)", verdict.stale)):
        lines += [f"## {title}: {len(ids)}", ""]
        msgs = {}
        for c in comparisons:
            for t, m in c.messages.items():
                msgs[f"{c.file}::{t.split('::', 1)[1]}"] = (m, c.cpu_messages.get(t))
        for i in ids:
            m, cm = msgs.get(i, ([], None))
            lines.append(f"- `{i}`")
            for line in m[-3:]:
                lines.append(f"    - neuron: {line[:300]}")
            if cm:
                lines.append(f"    - cpu: {cm[-1][:300]}")
        lines.append("")
    report.write_text("\n".join(lines) + "\n")
    (outdir / "summary.json").write_text(json.dumps({
        c.file: {"counts": {d: dict(k) for d, k in c.counts.items()},
                 "cpu_pass_neuron_fail": c.cpu_pass_neuron_fail,
                 "neuron_fail_cpu_fail": c.neuron_fail_cpu_fail,
                 "neuron_fail_cpu_skipped": c.neuron_fail_other} for c in comparisons},
        indent=1))
    return report


def drift_lines(comparisons: list[FileComparison], known: dict[str, Entry]) -> list[str]:
    """Known-failure lines for neuron failures that fail on the CPU too and have no entry yet:
    the CPU's own error as the reason (reviewed before they are added)."""
    out = []
    for c in comparisons:
        for test in c.neuron_fail_cpu_fail:
            key = f"{c.file}::{test.split('::', 1)[1]}"
            if key in known:
                continue
            cpu = c.cpu_messages.get(test) or ["(no message)"]
            reason = " ".join(cpu[-1].split())[:160]
            out.append(f"{key}\tversion-drift\tfails on the CPU too: {reason}")
    return out


# ---------------------------------------------------------------------------------------------

def prepare(workdir: Path) -> Path:
    src = source_dir()
    if not (src / "conftest.py").exists():
        raise SystemExit(missing_source_message())
    tests = workdir / "tests"
    if tests.exists():
        shutil.rmtree(tests)
    shutil.copytree(src, tests, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return tests


def run(suites, workdir: Path, devices=("cpu", "neuron"), timeout_s: int = 900, log=print):
    tests = prepare(workdir)
    outdir = workdir / "results"
    outdir.mkdir(parents=True, exist_ok=True)
    comparisons, ran = [], set()
    for suite in suites:
        recs = {}
        for device in devices:
            log(f"running {suite.file}" + (f" -k '{suite.keyword}'" if suite.keyword else "") +
                f" on {device}")
            recs[device] = run_suite(suite, device, tests, outdir, timeout_s, log=log)
        c = compare(suite.file, recs.get("cpu", {}), recs.get("neuron", {}))
        comparisons.append(c)
        ran |= {f"{suite.file}::{normalize(k).split('::', 1)[1]}" for k in recs.get("neuron", {})}
    return comparisons, ran


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", choices=["full", "ci"], default="full")
    parser.add_argument("--files", nargs="*", help="only these files (of the chosen subset)")
    parser.add_argument("-k", dest="keyword", help="override the -k expression")
    parser.add_argument("--workdir", default=str(REPO / "build" / "conformance"))
    parser.add_argument("--timeout", type=int, default=900, help="per-test limit, s")
    parser.add_argument("--print-drift", action="store_true",
                        help="print list lines for CPU-and-neuron failures that have none")
    args = parser.parse_args(argv)

    suites = FULL if args.subset == "full" else CI_SUBSET
    if args.files:
        suites = tuple(s for s in suites if s.file in args.files)
    if args.keyword is not None:
        suites = tuple(dataclasses.replace(s, keyword=args.keyword) for s in suites)
    workdir = Path(args.workdir)
    known = read_known_failures()
    comparisons, ran = run(suites, workdir, timeout_s=args.timeout)
    verdict = judge(comparisons, known, ran)
    report = write_report(workdir / "results", comparisons, verdict, known)
    print(summary_table(comparisons))
    non_drift = sum(e.reason_class not in DRIFT_CLASSES for e in known.values())
    unskipped = [e.test for e in known.values()
                 if e.reason_class == "version-drift-skip" and not opinfo_skips(e.test)]
    print(f"\nknown failures: {len(known)} entries, {non_drift} not version drift "
          f"(at most {MAX_NON_DRIFT_ENTRIES}); used in this run: {len(verdict.used)}")
    print(f"neuron failures without an entry: {len(verdict.unexplained)}; misfiled as drift: "
          f"{len(verdict.misfiled_drift)}; stale entries: {len(verdict.stale)}")
    if unskipped:
        print("version-drift-skip entries that the installed torch's OpInfo does not skip:\n  " +
              "\n  ".join(unskipped))
    print(f"report: {report}")
    if args.print_drift:
        print("\n".join(drift_lines(comparisons, known)))
    ok = not (verdict.unexplained or verdict.misfiled_drift or verdict.stale or unskipped) and \
        non_drift <= MAX_NON_DRIFT_ENTRIES
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The CI subset of the conformance harness (suites.py, docs/conformance.md): PyTorch's own
device-generic tests, run for neuron and for the CPU in this environment and compared per test.
Every test that fails on neuron must be in tests/conformance/known_failures.txt with its reason
class, and every entry whose test ran must still fail (a fixed test's entry is removed).

The PyTorch files are not part of this repository: they are read from PYTORCH_TESTS (default
../shared/pytorch-tests beside the repository). Without them the subset is skipped, naming the
variable. `make conformance` runs the three files in full."""

import pytest

import suites

KNOWN = suites.read_known_failures()


def test_known_failures_list_is_well_formed():
    """One line per test, a known class, a reason; at most 30 entries that are not version
    drift (tests that fail on the CPU too, or that the installed torch skips on every device)."""
    non_drift = [e for e in KNOWN.values() if e.reason_class not in suites.DRIFT_CLASSES]
    assert len(non_drift) <= suites.MAX_NON_DRIFT_ENTRIES, [e.test for e in non_drift]
    for entry in KNOWN.values():
        assert entry.test.split("::")[0] in {s.file for s in suites.FULL}, entry.test
        assert "_DEVICE" in entry.test or "DEVICE" in entry.test, entry.test
        if entry.reason_class == "by-design":
            # The TorchNeuron documentation that says the same.
            assert "https://" in entry.reason, entry.test
        if entry.reason_class == "version-drift-skip":
            assert suites.opinfo_skips(entry.test), (
                f"{entry.test}: the installed torch's OpInfo does not skip it on every device")


def test_opinfo_skip_lookup():
    # torch 2.13 skips float16 floor_divide's extremal values under TestBinaryUfuncsDevice, not
    # float32's, and nothing under TestBinaryUfuncs's other tests for it.
    base = "test_binary_ufuncs.py::TestBinaryUfuncs::test_reference_numerics_extremal_values_"
    assert suites.opinfo_skips(base + "floor_divide_DEVICE_float16")
    assert not suites.opinfo_skips(base + "floor_divide_DEVICE_float32")
    assert not suites.opinfo_skips(
        "test_binary_ufuncs.py::TestBinaryUfuncs::test_contig_vs_every_other_floor_divide_DEVICE_float16")
    assert not suites.opinfo_skips("test_nn.py::TestNNDeviceType::test_x_DEVICE")


def test_normalized_ids_match_across_devices():
    assert (suites.normalize("test_nn.py::TestNNDeviceTypePRIVATEUSE1::test_x_neuron_float32")
            == suites.normalize("test_nn.py::TestNNDeviceTypeCPU::test_x_cpu_float32")
            == "test_nn.py::TestNNDeviceType::test_x_DEVICE_float32")
    assert (suites.normalize("test_view_ops.py::TestOldViewOpsNEURON::test_view_neuron")
            == "test_view_ops.py::TestOldViewOps::test_view_DEVICE")


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    if not (suites.source_dir() / "conftest.py").exists():
        pytest.skip(suites.missing_source_message())
    workdir = suites.REPO / "build" / "conformance-ci"
    comparisons, ran = suites.run(suites.CI_SUBSET, workdir, timeout_s=300, log=lambda *_: None)
    return comparisons, ran, suites.judge(comparisons, KNOWN, ran)


def test_every_neuron_failure_is_a_known_failure(ci_run):
    comparisons, _, verdict = ci_run
    assert sum(c.counts["neuron"]["passed"] for c in comparisons) > 300  # the subset ran
    assert not verdict.unexplained, (
        "tests that fail on neuron without an entry in known_failures.txt (fix the kernel, or "
        "add the test with its reason class):\n" + "\n".join(verdict.unexplained))


def test_version_drift_entries_fail_on_the_cpu_too(ci_run):
    _, _, verdict = ci_run
    assert not verdict.misfiled_drift, verdict.misfiled_drift


def test_no_stale_entries(ci_run):
    _, _, verdict = ci_run
    assert not verdict.stale, (
        "known failures that pass on neuron now (remove them from known_failures.txt):\n"
        + "\n".join(verdict.stale))

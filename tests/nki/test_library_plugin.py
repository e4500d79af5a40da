"""tools/nki_library_shim/nki_library_plugin.py, the pytest plugin `make nki-library` loads into
AWS's library harness: a failed test's exception must not outlive it (pytest keeps it in
sys.last_value / sys.last_traceback, whose frames held a failed large case's arrays into the next
tests), and the memory log must name each failure's cause."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SHIM = Path(__file__).resolve().parents[2] / "tools" / "nki_library_shim"


def test_failure_is_dropped_and_its_cause_logged(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        import sys

        def test_a_fails():
            held = bytearray(1 << 20)  # what the failed frame keeps alive
            assert False, "the cause of a"

        def test_b_sees_no_last_failure():
            assert getattr(sys, "last_value", None) is None
            assert getattr(sys, "last_traceback", None) is None
        """))
    log = tmp_path / "memory.log"
    env = dict(os.environ, NKI_LIBRARY_MEMORY_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "nki_library_plugin", "-p", "no:cacheprovider",
         "-q", "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr
    lines = log.read_text().splitlines()
    failed = [line for line in lines if " failed " in line]
    assert len(failed) == 1 and "test_a_fails" in failed[0]
    assert "why=AssertionError: the cause of a" in failed[0]
    assert any(" passed " in line and "test_b_sees_no_last_failure" in line for line in lines)

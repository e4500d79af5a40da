"""The portability report: run code on ``neuron`` here and list what would differ on TorchNeuron
2.33 — ops outside its native eager coverage (CPU fallback there), 64-bit and complex dtypes,
channels_last, changing shapes and the recompiles they cost, graph breaks, transformers'
asynchronous weight loading — each with the file:line in the user's code and what to change.

Use::

    with torch_neuronx.portability_report() as check:      # a block of code
        train_step()
    print(check.text()); check.to_json()

    report = torch_neuronx.portability_report("train.py", ["--steps", "2"])   # a script

    python -m torch_neuronx.portability [--strict] [--json out.json] train.py --steps 2

Strict mode (``strict=True`` or ``TORCH_NEURONX_PORTABILITY_STRICT=1``) raises
:class:`PortabilityError` at the end of the check when anything would differ, so CI for
TorchNeuron code fails here before it fails on hardware. docs/portability.md has the details.
"""

import os
import runpy
import sys

from torch_neuronx.portability.report import (  # noqa: F401
    CATEGORIES,
    Finding,
    PortabilityError,
    PortabilityReport,
)
from torch_neuronx.portability.session import (
    IGNORE_ENV,
    STRICT_ENV,
    Session,
    ignore_rules,
    strict_from_env,
)

__all__ = [
    "CATEGORIES",
    "Finding",
    "IGNORE_ENV",
    "PortabilityCheck",
    "PortabilityError",
    "PortabilityReport",
    "STRICT_ENV",
    "portability_report",
    "run_script",
]


class PortabilityCheck:
    """The context manager :func:`portability_report` returns. After the block, ``report`` is the
    :class:`PortabilityReport`, and the check itself reads like it (``findings``, ``warnings``,
    ``text()``, ``to_json()``, ``str()``)."""

    def __init__(self, strict: bool, ignore=()):
        self.strict = strict
        self.ignore = tuple(ignore)
        self.report = None
        self._session = None

    def __enter__(self):
        self._session = Session(self.strict, self.ignore)
        self._session.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.report = self._session.stop()
        if self.strict and exc_type is None:
            self.report.raise_if_findings()
        return False

    def __getattr__(self, name):
        report = self.__dict__.get("report")
        if report is None:
            raise AttributeError(
                f"{name!r}: the portability report exists once the `with` block has ended")
        return getattr(report, name)

    def __str__(self) -> str:
        return str(self.report) if self.report is not None else "<portability check running>"


def run_script(path, args=(), strict: bool = False, ignore=()):
    """Run a Python script as ``__main__`` (``sys.argv = [path, *args]``, its folder first on
    ``sys.path``) under a portability check. Returns ``(report, error)``: ``error`` is the
    exception the script ended with (``SystemExit`` with a non-zero code included), or None.
    Strict mode is left to the caller."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"portability report: no script at {path!r}")
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *map(str, args)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    session = Session(strict, ignore)
    error = None
    session.start()
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            error = exit_
    except BaseException as failure:  # the report is still worth having
        error = failure
    finally:
        report = session.stop()
        sys.argv, sys.path[:] = saved_argv, saved_path
    return report, error


def portability_report(script=None, args=(), *, strict=None, ignore=None):
    """What would differ on TorchNeuron 2.33.

    - ``portability_report()``: a context manager (:class:`PortabilityCheck`) checking the code
      in its block.
    - ``portability_report(callable)``: calls it (no arguments) under the check, returns the
      :class:`PortabilityReport`.
    - ``portability_report("script.py", ["arg", ...])``: runs the script as ``__main__`` under the
      check, returns the report; an exception the script raises propagates.

    ``strict``: raise :class:`PortabilityError` when anything would differ (default: the
    ``TORCH_NEURONX_PORTABILITY_STRICT`` environment variable, off).
    ``ignore``: findings to accept, listed but not counted (``["cpu_fallback:aten::normal_",
    "int64_range"]``: a category, or ``category:subject``); default: the comma-separated
    ``TORCH_NEURONX_PORTABILITY_IGNORE``.
    """
    strict = strict_from_env() if strict is None else bool(strict)
    ignore = ignore_rules(ignore)
    if script is None:
        return PortabilityCheck(strict, ignore)
    if callable(script):
        with PortabilityCheck(False, ignore) as check:
            script()
        report = check.report
        report.strict = strict
    else:
        report, error = run_script(script, args, strict, ignore)
        report.strict = strict
        if error is not None:
            raise error
    if strict:
        report.raise_if_findings()
    return report

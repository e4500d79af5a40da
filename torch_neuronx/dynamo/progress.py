"""The one line a cold compile prints: that it is compiling (which graph, how many ops) once it has
taken longer than a moment, and how long it took when it ends.

    torch_neuronx: compiling graph 3 (58 ops) for torch.compile(backend="neuron") ... 14.2 s, 2 programs

A compile served by the program cache, or a small graph, ends before the notice is due and prints
nothing. The line goes to stderr through the logger "torch_neuronx.compile": set that logger's
level above INFO to silence it (logging.getLogger("torch_neuronx.compile").setLevel(logging.WARNING)).
"""

from __future__ import annotations

import logging
import sys
import threading
import time

# A compile still running after this long is announced (seconds).
NOTICE_AFTER_S = 1.0

_log = logging.getLogger("torch_neuronx.compile")
_write_lock = threading.Lock()


def _enabled() -> bool:
    # The logger's default (no level of its own) prints the line: only a level set on the logger
    # itself above INFO silences it.
    return _log.level == logging.NOTSET or _log.level <= logging.INFO


class CompileNotice:
    """Context manager around one compile: `what` names it ("graph 3 (58 ops)"); `programs`
    returns how many programs have been compiled so far (counted at the end against the start)."""

    def __init__(self, what: str, programs=None):
        self.what = what
        self.programs = programs
        self._announced = False
        self._timer = None
        self._start = 0.0
        self._programs_before = 0

    def _announce(self) -> None:
        with _write_lock:
            sys.stderr.write(f"torch_neuronx: compiling {self.what} for "
                             f"torch.compile(backend=\"neuron\") ...")
            sys.stderr.flush()
            self._announced = True

    def __enter__(self):
        self._start = time.perf_counter()
        self._programs_before = self.programs() if self.programs else 0
        if _enabled():
            self._timer = threading.Timer(NOTICE_AFTER_S, self._announce)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
        if not self._announced:
            return False
        elapsed = time.perf_counter() - self._start
        if exc_type is not None:
            end = f" failed after {elapsed:.1f} s\n"
        else:
            made = (self.programs() - self._programs_before) if self.programs else 0
            end = f" {elapsed:.1f} s" + (f", {made} program{'s' * (made != 1)}" if made else "") + "\n"
        with _write_lock:
            sys.stderr.write(end)
            sys.stderr.flush()
        return False

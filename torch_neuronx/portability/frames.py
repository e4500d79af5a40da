"""Where in the user's code something happened: the innermost Python frame that belongs neither
to torch, to this package, to the standard library nor to an installed library."""

import os
import site
import sys
import sysconfig

import torch

import torch_neuronx

_INTERNAL, _LIBRARY, _USER = 0, 1, 2


def _prefix(path: str) -> str:
    return os.path.join(os.path.realpath(path), "")


# Checked in this order: torch and this package, then installed libraries, then the standard
# library (in a virtual environment the "platstdlib" folder contains site-packages).
_ours = tuple(_prefix(p) for p in (os.path.dirname(torch.__file__),
                                   os.path.dirname(torch_neuronx.__file__)))
_library_prefixes = tuple({_prefix(p) for p in (
    sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
    *getattr(site, "getsitepackages", lambda: [])(),
)})
_stdlib = tuple({_prefix(p) for p in (sysconfig.get_paths()["stdlib"],
                                      sysconfig.get_paths()["platstdlib"])})
_kinds: dict = {}


def _classify_path(filename: str) -> int:
    if filename.startswith("<frozen"):
        return _INTERNAL
    real = os.path.realpath(filename) if os.path.isabs(filename) else filename
    if real.startswith(_ours):
        return _INTERNAL
    if real.startswith(_library_prefixes):
        return _LIBRARY
    if real.startswith(_stdlib):
        return _INTERNAL
    return _USER


def _kind(code) -> int:
    kind = _kinds.get(code)
    if kind is None:
        filename = code.co_filename
        if filename.startswith("<frozen") or filename.startswith("<__array_function__"):
            kind = _INTERNAL
        else:
            kind = _classify_path(filename)
        _kinds[code] = kind
    return kind


class Site:
    """A place in user code (``where``), the innermost library frame under it (``via``, e.g. a
    transformers modeling file) and the nn.Module objects the call went through (their ids)."""

    __slots__ = ("where", "function", "via", "modules")

    def __init__(self, where, function, via, modules):
        self.where = where
        self.function = function
        self.via = via
        self.modules = modules


def _location(frame) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def current_site(skip: int = 1, with_modules: bool = False, caller_of_user: bool = False) -> Site:
    """The user's frame calling into torch right now (``skip`` frames of the caller dropped).
    ``caller_of_user``: the user frame that called the innermost one, when there is one (a
    compiled program runs inside the compiled function's own frame; the shapes come from its
    caller)."""
    frame = sys._getframe(skip + 1)
    via = None
    modules = []
    inner = None
    while frame is not None:
        code = frame.f_code
        kind = _kind(code)
        if kind == _USER:
            if caller_of_user and inner is None:
                inner = frame
                frame = frame.f_back
                continue
            return Site(_location(frame), code.co_name, via, tuple(modules))
        if kind == _LIBRARY and via is None:
            via = _location(frame)
        if with_modules and code.co_name == "_call_impl" and kind == _INTERNAL:
            module = frame.f_locals.get("self")
            if module is not None:
                modules.append(id(module))
        frame = frame.f_back
    if inner is not None:
        return Site(_location(inner), inner.f_code.co_name, via, tuple(modules))
    return Site(via or "<unknown>", None, None, tuple(modules))


def site_from_summary(stack) -> Site:
    """The same choice over a list of ``traceback.FrameSummary`` (outermost first), as Dynamo
    records the user code it traced."""
    via = None
    for summary in reversed(list(stack)):
        kind = _classify_path(summary.filename)
        if kind == _INTERNAL:
            continue
        location = f"{summary.filename}:{summary.lineno}"
        if kind == _LIBRARY:
            via = via or location
            continue
        return Site(location, summary.name, via, ())
    return Site(via or "<unknown>", None, None, ())

"""The persistent program cache of ``torch.compile(backend="neuron")``: TorchNeuron's NEFF cache.

TorchNeuron keeps one compiled NEFF per graph on disk in ``TORCH_NEURONX_NEFF_CACHE_DIR``, shared
between processes under file locks (``TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT``), and turned off by
``TORCH_NEURONX_DISABLE_NEFF_CACHE``. Our programs are Inductor's compiled CPU code, so an entry
holds what it takes to run a program again without compiling it:

- Inductor's serialized compiled graph (the generated wrapper code, its guards for symbolic
  shapes, output strides, constants' locations: the bytes Inductor's FX graph cache stores), and
- the compiled C++ kernel libraries (.so) that wrapper loads, so a warm start needs no C++
  compiler run even when Inductor's own cache directory has been emptied.

A second kind of entry, one per Dynamo graph (GraphStore, ``.graph``), holds AOTAutograd's result
for the graph with its programs named by their entries' keys, so a restart skips AOTAutograd's
trace and partition too.

The key is Inductor's FX graph key (graph, input shapes/strides/dtypes, Inductor configuration,
torch version, C++ compiler and CPU) hashed together with our compiler's version (the
torch_neuronx version and the source of the compile pipeline), so a change on either side misses.

Inductor keys, serializes and validates (guards) the graph; this module stores it. During one
program compile the store is handed to Inductor as its "remote" FX graph cache and Inductor's
local FX cache is switched off, so this directory is the only cache a neuron program can come
from, and its hits and misses are the ones the metrics report.

An entry is one file, written to a temporary name and renamed (atomic on POSIX): readers never see
half an entry. It starts with a magic number and a header carrying the payload's length and
SHA-256; a truncated or corrupted file fails that check, is reported (a warning and the
``cache_corrupted`` metric), removed and rebuilt. A process that misses takes the entry's file
lock and holds it while it compiles, so a second process asking for the same program waits and
then loads what the first wrote instead of compiling it too; a lock not obtained within the
timeout is reported and the process compiles without it (writes stay atomic, so that is still
safe).

``torch.compiler.save_cache_artifacts()`` carries the entries written or read in this process
(artifact types ``neuron_neff`` and ``neuron_graph``); ``load_cache_artifacts()`` puts them back
into this directory.
"""

import base64
import contextlib
import functools
import hashlib
import json
import os
import pathlib
import pickle
import struct
import tempfile
import threading
import types
import warnings

from torch.compiler._cache import CacheArtifact, CacheArtifactFactory, CacheArtifactManager

from torch_neuronx import _env
from torch_neuronx.dynamo import metrics

DIR_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
LOCAL_DIR_ENV = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"  # where the lock files go (TorchNeuron's)
DISABLE_ENVS = ("TORCH_NEURONX_DISABLE_NEFF_CACHE", "TORCH_NEURONX_NEFF_DISABLE_CACHE")
LOCK_TIMEOUT_ENV = "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"
# The default (torch_neuronx/_env.py) is long enough for a large graph's compile in another
# process; a user with bigger graphs raises it.

_MAGIC = b"TNXNEFF\x01"
_FORMAT = 1
_SUFFIX = ".neff"
_GRAPH_SUFFIX = ".graph"


def enabled() -> bool:
    return not any(_env.switch(name) for name in DISABLE_ENVS)


def cache_dir() -> pathlib.Path:
    """``TORCH_NEURONX_NEFF_CACHE_DIR``, else ``$XDG_CACHE_HOME/torch_neuronx/neff``, else
    ``~/.cache/torch_neuronx/neff``."""
    explicit = _env.path(DIR_ENV)
    if explicit:
        return pathlib.Path(explicit).resolve()
    base = _env.foreign("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base, "torch_neuronx", "neff").resolve()


def lock_timeout() -> float:
    """Seconds a process waits for the lock of an entry another process is compiling."""
    return _env.seconds(LOCK_TIMEOUT_ENV)



@functools.lru_cache(None)
def compiler_version() -> str:
    """torch's and our version, and a hash of the compile pipeline's source: a program compiled
    by other code is another entry."""
    import torch

    import torch_neuronx

    digest = hashlib.sha256()
    here = pathlib.Path(__file__).parent
    for name in ("backend.py", "program_cache.py", "graph_cost.py", "attention.py", "random_ops.py",
                 "inductor_fixes.py"):
        digest.update((here / name).read_bytes())
    return f"torch {torch.__version__}, torch_neuronx {torch_neuronx.__version__}, " \
        f"pipeline {digest.hexdigest()[:16]}"


def entry_key(inductor_key: str) -> str:
    return hashlib.sha256(f"{compiler_version()}|{inductor_key}".encode()).hexdigest()


def entry_path(key: str) -> pathlib.Path:
    return cache_dir() / key[:2] / (key + _SUFFIX)


def _lock_path(key: str) -> pathlib.Path:
    local = _env.path(LOCAL_DIR_ENV)
    base = pathlib.Path(local).resolve() / "locks" if local else cache_dir() / key[:2]
    return base / (key + _SUFFIX + ".lock")


# --- entry format -------------------------------------------------------------------------------

class CorruptedEntry(Exception):
    """An entry file that fails its checks (says which)."""


def encode_entry(key: str, payload: dict) -> bytes:
    body = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    header = json.dumps({
        "format": _FORMAT,
        "key": key,
        "compiler": compiler_version(),
        "payload_bytes": len(body),
        "payload_sha256": hashlib.sha256(body).hexdigest(),
    }).encode()
    return _MAGIC + struct.pack(">Q", len(header)) + header + body


def decode_entry(content: bytes, key: str | None = None, field: str = "fx_graph") -> dict:
    """The payload of an entry, after checking magic, header, length and checksum. `field` is
    what the payload must hold: a program's compiled graph, or a graph entry's AOTAutograd
    result."""
    if len(content) < len(_MAGIC) + 8 or content[:len(_MAGIC)] != _MAGIC:
        raise CorruptedEntry("not a neuron program cache entry (bad magic number)")
    (header_len,) = struct.unpack(">Q", content[len(_MAGIC):len(_MAGIC) + 8])
    start = len(_MAGIC) + 8
    if header_len > len(content) - start:
        raise CorruptedEntry(f"truncated header ({len(content)} bytes in the file)")
    try:
        header = json.loads(content[start:start + header_len])
    except ValueError as error:
        raise CorruptedEntry(f"unreadable header ({error})") from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise CorruptedEntry(f"unknown entry format {header!r:.80}")
    if key is not None and header.get("key") != key:
        raise CorruptedEntry(f"entry is for key {header.get('key')!r:.20}, not this file's")
    body = content[start + header_len:]
    if len(body) != header.get("payload_bytes"):
        raise CorruptedEntry(
            f"truncated payload ({len(body)} of {header.get('payload_bytes')} bytes)")
    if hashlib.sha256(body).hexdigest() != header.get("payload_sha256"):
        raise CorruptedEntry("payload checksum mismatch")
    try:
        payload = pickle.loads(body)
    except Exception as error:  # a checksum-valid body that still does not load
        raise CorruptedEntry(f"payload does not load ({type(error).__name__})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get(field), bytes):
        raise CorruptedEntry(f"payload has no {field}")
    return payload


def _write_atomic(path: pathlib.Path, content: bytes) -> None:
    """Write to a temporary file in the same directory, then rename over `path`: a reader sees
    the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _report_corrupted(path: pathlib.Path, why: str) -> None:
    metrics.record("cache_corrupted")
    warnings.warn(
        f"torch.compile(backend='neuron'): program cache entry {path} is corrupted ({why}); "
        f"it is removed and the program compiled again.", stacklevel=3)
    with contextlib.suppress(OSError):
        path.unlink()


def _read_entry(path: pathlib.Path, key: str, field: str, artifact) -> dict | None:
    """The payload of the entry at `path`; None when there is none, or when it is corrupted
    (reported, removed: the caller compiles again)."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        _report_corrupted(path, f"unreadable: {error}")
        return None
    try:
        payload = decode_entry(content, key, field)
    except CorruptedEntry as error:
        _report_corrupted(path, str(error))
        return None
    CacheArtifactManager.record_artifact(artifact.type(), key, content)
    return payload


# --- kernel libraries ---------------------------------------------------------------------------

def _inductor_cache_dir() -> pathlib.Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return pathlib.Path(inductor_cache_dir()).resolve()


def _kernel_libraries(compiled) -> dict:
    """The C++ kernel libraries (.so under Inductor's cache directory) a compiled graph's wrapper
    calls, by path relative to that directory. Found from the wrapper module's globals: each
    kernel is a function of an extension module loaded from its .so."""
    call = getattr(compiled, "current_callable", None)
    module_globals = getattr(call, "__globals__", None) or {}
    root = _inductor_cache_dir()
    libraries = {}
    for value in list(module_globals.values()):
        owner = getattr(value, "__self__", None)
        if not isinstance(value, types.BuiltinFunctionType) or not isinstance(owner,
                                                                               types.ModuleType):
            continue
        file = getattr(owner, "__file__", None)
        if not file or not file.endswith(".so"):
            continue
        path = pathlib.Path(file).resolve()
        if root not in path.parents or not path.is_file():
            continue
        libraries[str(path.relative_to(root))] = path.read_bytes()
    return libraries


def _install_kernel_libraries(libraries: dict) -> None:
    """Put an entry's kernel libraries where Inductor looks for them (paths are hashes of the
    kernel source and compile command, so an existing file is the same library)."""
    root = _inductor_cache_dir()
    for relative, content in libraries.items():
        target = (root / relative).resolve()
        if root not in target.parents:
            raise CorruptedEntry(f"kernel library path {relative!r} leaves the cache directory")
        if not target.exists():
            _write_atomic(target, content)


def load_program(key: str) -> bytes | None:
    """Inductor's serialized compiled graph from the program entry `key`, with its kernel
    libraries installed where its wrapper loads them; None when the entry is missing or corrupted
    (reported and removed)."""
    path = entry_path(key)
    payload = _read_entry(path, key, "fx_graph", NeffCacheArtifact)
    if payload is None:
        return None
    try:
        _install_kernel_libraries(payload.get("libraries", {}))
    except (CorruptedEntry, OSError) as error:
        _report_corrupted(path, str(error))
        return None
    return payload["fx_graph"]


# --- the store Inductor reads and writes during one program compile ------------------------------

class ProgramStore:
    """This cache as Inductor's remote FX graph cache for ONE program compile (``get`` and
    ``put`` are what Inductor calls). A miss keeps the entry's file lock until :meth:`finish`,
    so concurrent compiles of the same program in other processes wait for this one's entry."""

    def __init__(self):
        self._lock = None
        self._pending = None  # (key, Inductor's serialized graph) to write at finish()
        self.stored_key = None  # the key of the entry this program was loaded from or written to

    # Inductor's remote cache interface -------------------------------------------------------
    def get(self, inductor_key: str):
        key = entry_key(inductor_key)
        fx_graph = load_program(key)
        if fx_graph is None:
            self._acquire(key)
            # Another process may have written the entry while this one waited for the lock.
            fx_graph = load_program(key)
        if fx_graph is None:
            return None
        self._release()
        self.stored_key = key
        return {"data": base64.b64encode(fx_graph).decode("ascii")}

    def put(self, inductor_key: str, value) -> None:
        self._pending = (entry_key(inductor_key), base64.b64decode(value["data"]))

    # ours ----------------------------------------------------------------------------------
    def finish(self, compiled) -> None:
        """After the compile: write the entry (with the kernel libraries the compiled wrapper
        loaded) if Inductor produced one, and release the lock in any case."""
        try:
            if self._pending is not None and compiled is not None:
                key, fx_graph = self._pending
                content = encode_entry(key, {
                    "fx_graph": fx_graph,
                    "libraries": _kernel_libraries(compiled),
                })
                try:
                    _write_atomic(entry_path(key), content)
                except OSError as error:
                    warnings.warn(
                        f"torch.compile(backend='neuron'): could not write the program cache "
                        f"entry {entry_path(key)} ({error}); the program runs, uncached.",
                        stacklevel=2)
                else:
                    self.stored_key = key
                    CacheArtifactManager.record_artifact(NeffCacheArtifact.type(), key, content)
        finally:
            self._pending = None
            self._release()

    def _acquire(self, key: str) -> None:
        import filelock

        if self._lock is not None:
            return
        path = _lock_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(path))
        timeout = lock_timeout()
        try:
            lock.acquire(timeout=timeout)
        except filelock.Timeout:
            metrics.record("cache_lock_timeouts")
            warnings.warn(
                f"torch.compile(backend='neuron'): waited {timeout:g} s for the program cache "
                f"lock {path} (another process compiling the same program); compiling without "
                f"it. Raise {LOCK_TIMEOUT_ENV} to wait longer.", stacklevel=4)
            return
        self._lock = lock

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


_serving = threading.RLock()


@contextlib.contextmanager
def serving(store: ProgramStore):
    """Inductor compiles with `store` as its only FX graph cache (its local one off). Inductor's
    configuration is process-wide, so program compiles that use a store run one at a time."""
    from unittest import mock

    import torch._inductor.config as inductor_config
    from torch._functorch import config as functorch_config
    from torch._inductor.codecache import FxGraphCache

    # Inside a graph's compile AOTAutograd bundles its cache entry (serving_graphs), which makes
    # Inductor skip its FX graph cache: a program compile turns that off again.
    with _serving, inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=True), \
            functorch_config.patch(bundled_autograd_cache=False), \
            mock.patch.object(FxGraphCache, "get_remote_cache", staticmethod(lambda: store)):
        yield store


# --- graph entries: AOTAutograd's result for a Dynamo graph -------------------------------------

def graph_entry_path(key: str) -> pathlib.Path:
    return cache_dir() / key[:2] / (key + _GRAPH_SUFFIX)


class GraphStore:
    """This cache as AOTAutograd's remote cache for one Dynamo graph (``get`` and ``put`` are what
    AOTAutograd calls). A graph entry holds AOTAutograd's result for the graph: its runtime
    metadata and wrappers, and the graph's programs, each naming its own program entry (a
    program is stored once, in its .neff file). A restart that finds it skips AOTAutograd's
    trace and partition, our CPU copy of each graph and Inductor's graph key, and loads the
    programs' entries directly; one that does not, or finds a program entry missing or
    corrupted, compiles as before. Keyed by AOTAutograd's key (the graph, its inputs'
    metadata, the configuration) hashed with our compiler version and the backend's options.
    Written atomically like program entries; no lock: two processes missing the same graph
    both trace it, and the programs' locks keep them from compiling a program twice."""

    def __init__(self, options: dict):
        self._options = json.dumps(sorted(options.items()), default=str)

    def _key(self, aot_key: str) -> str:
        return entry_key(f"graph|{self._options}|{aot_key}")

    def get(self, aot_key: str):
        key = self._key(aot_key)
        payload = _read_entry(graph_entry_path(key), key, "aot_result", NeffGraphArtifact)
        if payload is None:
            return None
        return {"data": base64.b64encode(payload["aot_result"]).decode("ascii")}

    def put(self, aot_key: str, value) -> None:
        key = self._key(aot_key)
        content = encode_entry(key, {"aot_result": base64.b64decode(value["data"])})
        try:
            _write_atomic(graph_entry_path(key), content)
        except OSError as error:
            warnings.warn(
                f"torch.compile(backend='neuron'): could not write the graph cache entry "
                f"{graph_entry_path(key)} ({error}); its programs are cached, so a restart "
                f"traces the graph again and loads them.", stacklevel=2)
        else:
            CacheArtifactManager.record_artifact(NeffGraphArtifact.type(), key, content)


class _NotRecorded:
    """Stands in for torch's artifact recorder while AOTAutograd caches a neuron graph: graph
    entries travel in torch.compiler's artifacts as ``neuron_graph`` (below), never as
    AOTAutograd entries Inductor would load into its own cache."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, content) -> None:
        pass

    def record_if_present(self, content) -> None:
        pass


@contextlib.contextmanager
def serving_graphs(store: GraphStore):
    """AOTAutograd caches the Dynamo graph compiled inside this context in `store` only (its
    bundled form, which carries our programs' own serialization), never in Inductor's
    directory. The backward program is compiled with the forward one (not lazily at the first
    backward()), so the entry is written while this context holds."""
    from unittest import mock

    from torch._functorch import config as functorch_config
    from torch._functorch._aot_autograd import aot_autograd_result, autograd_cache

    cache = autograd_cache.AOTAutogradCache
    backward = aot_autograd_result.GenericCompiledBackward
    disabled_backward = backward.post_compile

    def boxed_backward(self, result, fx_config):
        # A loaded backward program comes back inside torch._dynamo.disable, which drops its
        # boxed calling convention (as the backend's own wrapper does not): keep it.
        wrapped = disabled_backward(self, result, fx_config)
        wrapped._boxed_call = getattr(result, "_boxed_call", False)
        return wrapped

    with _serving, functorch_config.patch(
            enable_autograd_cache=False, enable_remote_autograd_cache=True,
            bundled_autograd_cache=True, force_non_lazy_backward_lowering=True), \
            mock.patch.object(cache, "get_remote_cache", staticmethod(lambda: store)), \
            mock.patch.object(cache, "_write_to_local_cache", staticmethod(lambda *_: None)), \
            mock.patch.object(autograd_cache, "CacheArtifactRecorder", _NotRecorded), \
            mock.patch.object(backward, "post_compile", boxed_backward):
        yield store


# --- torch.compiler.save_cache_artifacts() / load_cache_artifacts() -------------------------------

class NeffCacheArtifact(CacheArtifact):
    """A program cache entry in torch.compiler's portable cache artifacts."""

    _what, _field, _path = "program", "fx_graph", staticmethod(entry_path)

    def populate_cache(self) -> None:
        if not enabled():
            return
        try:
            decode_entry(self.content, self.key, self._field)
        except CorruptedEntry as error:
            warnings.warn(
                f"torch.compiler.load_cache_artifacts: neuron {self._what} cache entry "
                f"{self.key[:16]} is corrupted ({error}); skipped.", stacklevel=2)
            return
        _write_atomic(self._path(self.key), self.content)

    @staticmethod
    def type() -> str:
        return "neuron_neff"


class NeffGraphArtifact(NeffCacheArtifact):
    """A graph cache entry (GraphStore) in torch.compiler's portable cache artifacts."""

    _what, _field, _path = "graph", "aot_result", staticmethod(graph_entry_path)

    @staticmethod
    def type() -> str:
        return "neuron_graph"


for _artifact in (NeffCacheArtifact, NeffGraphArtifact):
    if _artifact.type() not in CacheArtifactFactory._artifact_types:
        CacheArtifactFactory.register(_artifact)

"""TorchNeuron's profiler entry points over ``torch.profiler``, under TorchNeuron's documented
import path: ``from torch_neuronx.profiling import NeuronConfig, ProfileMode, NeuronProfiler``
(``torch_neuronx.NeuronProfiler`` too).

Device events come from the backend's Kineto activity profiler (``ProfilerActivity.PrivateUse1``):
one event per launch record, on the simulated Trainium clock, in a process ``neuron:<index>`` with
one track per engine (see docs/profiler.md). This module adds TorchNeuron's names around it:

- ``NeuronProfiler``: a context manager (``start()`` / ``stop()``) that profiles CPU and neuron
  activity and writes the Chrome trace (``export_chrome_trace``) to ``profile_output_dir``; and,
  as TorchNeuron documents, ``NeuronProfiler(cfg).export_trace`` as ``on_trace_ready`` of a plain
  ``torch.profiler.profile``.
- ``NeuronConfig``: the ``experimental_config`` TorchNeuron passes to ``torch.profiler.profile``
  (it is a ``torch._C._profiler._ExperimentalConfig``), carrying the Neuron options.
- ``ProfileMode``: what a profile collects.
"""

from __future__ import annotations

import enum
import fnmatch
import itertools
import json
import os
import time
import warnings
from collections import defaultdict
from typing import Iterable, Optional, Sequence

import torch
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity

__all__ = ["NeuronConfig", "NeuronProfiler", "ProfileMode"]

# Chrome-trace categories of the events the neuron session writes (Kineto's names for them).
_DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_user_annotation"})
_RUNTIME_CATEGORY = "privateuse1_runtime"


class ProfileMode(enum.Enum):
    """What a profile collects. On the simulator:

    - ``DEVICE``: device events (each launch on the simulated NeuronCore's engine tracks);
    - ``RUNTIME``: host-side runtime events (``nrtsim::<kind>``: the host time the simulator
      spent executing each launch, with an arrow to its device event);
    - ``HOST_MEMORY``: host and device memory events (``profile_memory=True``);
    - ``CPU_UTIL``: host CPU utilisation sampling, which the simulator does not model (a warning
      says so; CPU op times are in every profile).
    """

    DEVICE = "device"
    RUNTIME = "runtime"
    CPU_UTIL = "cpu_util"
    HOST_MEMORY = "host_memory"


class NeuronConfig(_ExperimentalConfig):
    """Neuron profiling options, usable as ``torch.profiler.profile(experimental_config=...)``.

    ``modes``: the :class:`ProfileMode` values to collect (default device and runtime events).
    ``profile_output_dir``: where :class:`NeuronProfiler` writes traces.
    ``capture_enabled_for_nc``: the neuron device indices (logical cores) whose events the
    written trace keeps (default all). ``max_events_per_nc``: at most this many device events per
    core in the written trace, the earliest (default no limit).
    ``neff_cache_dir`` and ``precache_node_info`` are accepted for TorchNeuron scripts; the
    simulator runs no NEFFs, so there is nothing for them to do.
    """

    def __init__(
        self,
        modes: Optional[Iterable[ProfileMode]] = None,
        max_events_per_nc: Optional[int] = None,
        capture_enabled_for_nc: Optional[Iterable[int]] = None,
        profile_output_dir: str = "neuron_profiles",
        neff_cache_dir: Optional[str] = None,
        precache_node_info: bool = False,
    ):
        super().__init__()
        self.modes = frozenset(modes if modes is not None else (ProfileMode.DEVICE, ProfileMode.RUNTIME))
        for mode in self.modes:
            if not isinstance(mode, ProfileMode):
                raise TypeError(
                    f"NeuronConfig: modes must be ProfileMode values, got {mode!r}; "
                    f"use e.g. modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME]"
                )
        if max_events_per_nc is not None and max_events_per_nc < 0:
            raise ValueError(f"NeuronConfig: max_events_per_nc must be >= 0, got {max_events_per_nc}")
        self.max_events_per_nc = max_events_per_nc
        self.capture_enabled_for_nc = (
            frozenset(int(i) for i in capture_enabled_for_nc) if capture_enabled_for_nc is not None else None
        )
        self.profile_output_dir = os.fspath(profile_output_dir)
        self.neff_cache_dir = neff_cache_dir
        self.precache_node_info = precache_node_info


_trace_counter = itertools.count()


class NeuronProfiler:
    """Profiles CPU and neuron activity and writes the Chrome trace (open it in Perfetto).

    As a context manager::

        with torch_neuronx.NeuronProfiler(NeuronConfig(profile_output_dir="traces")) as prof:
            model(x)
        print(prof.trace_path)                  # the written trace
        print(prof.key_averages().table())      # torch.profiler's summary, device time included

    or with ``start()`` / ``stop()`` (``stop()`` returns the trace's path), or as TorchNeuron
    documents it, as the trace handler of a ``torch.profiler.profile``::

        cfg = NeuronConfig(profile_output_dir="traces")
        with torch.profiler.profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
            experimental_config=cfg, on_trace_ready=NeuronProfiler(cfg).export_trace):
            ...

    ``pytorch_activities`` replaces the default activities (CPU and PrivateUse1).
    ``event_filters``: name patterns (``fnmatch``, e.g. ``"aten::mm"`` or ``"Memcpy*"``) of the
    events the written trace keeps (a device event also by the op it ran for: ``"aten::mm"`` keeps
    ``aten::mm [tensor]``); ``None`` keeps all. ``record_shapes``, ``profile_memory``,
    ``with_stack`` and ``with_flops`` are ``torch.profiler.profile``'s.
    """

    def __init__(
        self,
        config: Optional[NeuronConfig] = None,
        *,
        pytorch_activities: Optional[Sequence[ProfilerActivity]] = None,
        event_filters: Optional[Sequence[str]] = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
    ):
        if config is not None and not isinstance(config, NeuronConfig):
            raise TypeError(
                f"NeuronProfiler: config must be a torch_neuronx.profiling.NeuronConfig, got {type(config).__name__}"
            )
        self.config = config if config is not None else NeuronConfig()
        self.pytorch_activities = (
            list(pytorch_activities)
            if pytorch_activities is not None
            else [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
        )
        if isinstance(event_filters, str):
            event_filters = [event_filters]
        self.event_filters = list(event_filters) if event_filters is not None else None
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory or ProfileMode.HOST_MEMORY in self.config.modes
        self.with_stack = with_stack
        self.with_flops = with_flops
        self.profiler: Optional[torch.profiler.profile] = None
        self.trace_path: Optional[str] = None

    # --- context manager -------------------------------------------------------------------

    def start(self) -> "NeuronProfiler":
        if self.profiler is not None:
            raise RuntimeError("NeuronProfiler.start(): already started; call stop() first")
        if ProfileMode.CPU_UTIL in self.config.modes:
            warnings.warn(
                "NeuronProfiler: ProfileMode.CPU_UTIL (host CPU utilisation sampling) is not modelled "
                "by the simulator; CPU op times are in the trace",
                stacklevel=2,
            )
        self.trace_path = None
        self.profiler = torch.profiler.profile(
            activities=self.pytorch_activities,
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
            experimental_config=self.config,
        )
        self.profiler.start()
        return self

    def stop(self) -> str:
        """Stops profiling and writes the trace; returns its path."""
        if self.profiler is None:
            raise RuntimeError("NeuronProfiler.stop(): not started; call start() first")
        if torch.neuron.is_initialized():
            torch.neuron.synchronize()  # every launch recorded before the trace is collected
        self.profiler.stop()
        return self.export_trace(self.profiler)

    def __enter__(self) -> "NeuronProfiler":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()

    # --- results ---------------------------------------------------------------------------

    def key_averages(self, *args, **kwargs):
        if self.profiler is None:
            raise RuntimeError("NeuronProfiler.key_averages(): nothing profiled yet")
        return self.profiler.key_averages(*args, **kwargs)

    def events(self):
        if self.profiler is None:
            raise RuntimeError("NeuronProfiler.events(): nothing profiled yet")
        return self.profiler.events()

    def export_trace(self, prof: torch.profiler.profile) -> str:
        """Writes `prof`'s Chrome trace into ``profile_output_dir``, filtered by the config and
        ``event_filters``; returns the path. Usable as ``on_trace_ready``."""
        os.makedirs(self.config.profile_output_dir, exist_ok=True)
        name = f"neuron_{os.getpid()}_{time.time_ns() // 1_000_000}_{next(_trace_counter)}.pt.trace.json"
        path = os.path.join(self.config.profile_output_dir, name)
        prof.export_chrome_trace(path)
        if self._filters_anything():
            with open(path) as f:
                trace = json.load(f)
            trace["traceEvents"] = self._filter(trace.get("traceEvents", []))
            with open(path, "w") as f:
                json.dump(trace, f)
        self.trace_path = path
        return path

    # --- trace filtering -------------------------------------------------------------------

    def _filters_anything(self) -> bool:
        c = self.config
        return (
            self.event_filters is not None
            or c.capture_enabled_for_nc is not None
            or c.max_events_per_nc is not None
            or ProfileMode.DEVICE not in c.modes
            or ProfileMode.RUNTIME not in c.modes
        )

    def _keeps(self, event: dict, device_counts: dict) -> bool:
        c = self.config
        category = event.get("cat")
        args = event.get("args") or {}
        if category in _DEVICE_CATEGORIES:
            if ProfileMode.DEVICE not in c.modes:
                return False
            if c.capture_enabled_for_nc is not None and event.get("pid") not in c.capture_enabled_for_nc:
                return False
            if category != "gpu_user_annotation" and c.max_events_per_nc is not None:
                device_counts[event.get("pid")] += 1
                if device_counts[event.get("pid")] > c.max_events_per_nc:
                    return False
        elif category == _RUNTIME_CATEGORY:
            if ProfileMode.RUNTIME not in c.modes:
                return False
            if c.capture_enabled_for_nc is not None and args.get("device") not in c.capture_enabled_for_nc:
                return False
        if self.event_filters is not None:
            # A device event matches by its name ("aten::mm [tensor]") or by the op it ran for
            # ("aten::mm"), so a filter naming an op keeps its CPU and its device events.
            names = (event.get("name", ""), (event.get("args") or {}).get("op", ""))
            return any(fnmatch.fnmatchcase(n, p) for n in names if n for p in self.event_filters)
        return True

    def _filter(self, events: list) -> list:
        # Complete events ("X") are filtered; a flow arrow ("s"/"f") stays only if both the slices
        # it binds to (same pid, tid and ts) stay; metadata stays.
        device_counts: dict = defaultdict(int)
        slices = sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e.get("ts", 0))
        dropped = set()
        for e in slices:
            if not self._keeps(e, device_counts):
                dropped.add(id(e))
        # A launch drawn on several engine tracks (an NKI kernel, a compiled program) has spans
        # there that name its correlation and lie within its simulated interval: they go with it.
        gone = defaultdict(list)
        for e in slices:
            args = e.get("args") or {}
            if id(e) in dropped and e.get("cat") in _DEVICE_CATEGORIES and "engine_span" not in args:
                gone[(e.get("pid"), args.get("correlation"))].append(
                    (args.get("sim_begin_ns"), args.get("sim_end_ns")))
        for e in slices:
            args = e.get("args") or {}
            if "engine_span" in args and id(e) not in dropped:
                for begin, end in gone.get((e.get("pid"), args.get("correlation")), ()):
                    if begin is not None and begin <= args.get("sim_begin_ns", -1) and args.get("sim_end_ns", 0) <= end:
                        dropped.add(id(e))
                        break
        dropped_anchors = {(e.get("pid"), e.get("tid"), e.get("ts")) for e in slices if id(e) in dropped}
        flows = [e for e in events if e.get("ph") in ("s", "f")]
        ends = defaultdict(set)
        for e in flows:
            if (e.get("pid"), e.get("tid"), e.get("ts")) not in dropped_anchors:
                ends[e.get("id")].add(e.get("ph"))
        kept_ids = {i for i, phases in ends.items() if phases == {"s", "f"}}
        out = []
        for e in events:
            ph = e.get("ph")
            if ph == "X" and id(e) in dropped:
                continue
            if ph in ("s", "f") and e.get("id") not in kept_ids:
                continue
            out.append(e)
        return out

"""TorchNeuron's documented import path for the profiler:
``from torch_neuronx.profiling import NeuronConfig, ProfileMode, NeuronProfiler``."""

from torch_neuronx.profiler import NeuronConfig, NeuronProfiler, ProfileMode

__all__ = ["NeuronConfig", "NeuronProfiler", "ProfileMode"]

"""Layers of nki-rmsnorm, as the `kernels` package expects: forward-only nn.Modules that use the
attributes of the module they replace (LlamaRMSNorm's `weight` and `variance_epsilon`)."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    weight: torch.Tensor
    variance_epsilon: float

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        from . import rms_norm

        return rms_norm(hidden_states, self.weight, self.variance_epsilon)

"""A parallel layout, and the inference request it serves."""

from __future__ import annotations

from dataclasses import dataclass, fields

_RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Layout:
    """A parallel layout.

    tp: tensor parallelism (in inference, the ranks of one model replica: attention is split
    over tp / adp of them, each expert over tp / ep); cp: context parallelism (each rank holds
    1/cp of every sequence); pp: pipeline stages; dp: data-parallel replicas; ep: expert
    parallelism (training: over ep of the dp replicas; inference: over ep of the tp ranks);
    adp: attention data parallelism inside the tp group (inference, NxD Inference's layout of
    mixture-of-experts models); fsdp: shard parameters, gradients and optimizer state over dp;
    zero1: shard the optimizer state over dp (ZeRO stage 1); recompute: "none", "selective"
    (rerun what is not a matmul, an attention or a collective) or "full" (keep each layer's
    input, rerun its forward); microbatches: per step and replica (gradient accumulation, and
    the pipeline's depth)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    fsdp: bool = False
    microbatches: int = 1
    cp: int = 1
    recompute: str = "none"
    ep: int = 1
    adp: int = 1
    zero1: bool = False

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """'tp=8,cp=2,pp=2,dp=4,ep=4,adp=8,fsdp,zero1,ac,ac=selective,mb=8' (any subset, any
        order; ac = full activation checkpointing)."""
        values: dict = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, value = (s.strip() for s in part.partition("="))
            if key in ("fsdp", "zero1") and not eq:
                values[key] = True
                continue
            if key in ("ac", "recompute"):
                value = value or "full"
                if value not in _RECOMPUTE:
                    raise ValueError(f"bad layout item {part!r}: recompute is one of {_RECOMPUTE}")
                values["recompute"] = value
                continue
            key = {"mb": "microbatches"}.get(key, key)
            if key not in ("tp", "cp", "pp", "dp", "ep", "adp", "microbatches") or not value.isdigit():
                raise ValueError(
                    f"bad layout item {part!r} in {text!r}: use tp=N, cp=N, pp=N, dp=N, ep=N, "
                    "adp=N, mb=N, fsdp, zero1, ac (full recompute) or ac=selective, comma-separated "
                    "(e.g. 'tp=8,dp=4,zero1,ac')")
            values[key] = int(value)
        layout = cls(**values)
        layout.check()
        return layout

    def check(self) -> None:
        for name in ("tp", "cp", "pp", "dp", "ep", "adp", "microbatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"layout {name}={getattr(self, name)} must be at least 1")
        if isinstance(self.recompute, bool):
            object.__setattr__(self, "recompute", "full" if self.recompute else "none")
        if self.recompute not in _RECOMPUTE:
            raise ValueError(f"layout recompute={self.recompute!r}: use one of {_RECOMPUTE}")
        if self.fsdp and self.zero1:
            raise ValueError("fsdp already shards the optimizer state: use fsdp or zero1, not both")
        if self.tp % self.adp != 0:
            raise ValueError(f"adp={self.adp} must divide tp={self.tp} (attention data-parallel "
                             "groups split the tp ranks)")

    def __post_init__(self):
        self.check()

    @property
    def ranks(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __str__(self) -> str:
        parts = [f"tp{self.tp}"] if self.tp > 1 else []
        if self.adp > 1:
            parts.append(f"adp{self.adp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.dp > 1:
            parts.append(f"{'fsdp' if self.fsdp else 'dp'}{self.dp}")
        if self.zero1:
            parts.append("zero1")
        if self.microbatches > 1:
            parts.append(f"mb{self.microbatches}")
        if self.recompute != "none":
            parts.append("ac" if self.recompute == "full" else "ac=selective")
        return " ".join(parts) or "1 rank"


# Default per-token acceptance rate of a draft model's proposals. Leviathan et al. (2023, "Fast
# Inference from Transformers via Speculative Decoding", table 3) measure about 0.5-0.8 for
# drafts of the same family as the target; 0.7 is inside that range. Set it per deployment.
DEFAULT_ACCEPTANCE = 0.7


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding: `draft` (a preset, config path, dict or config) proposes `tokens`
    per step, each accepted with probability `acceptance`; fused: the draft runs inside the
    target's program (NxD Inference's fused speculation), else as programs of its own."""

    draft: object
    tokens: int = 4
    acceptance: float = DEFAULT_ACCEPTANCE
    fused: bool = True

    def __post_init__(self):
        if self.tokens < 1:
            raise ValueError(f"speculation tokens={self.tokens} must be at least 1")
        if not 0 <= self.acceptance < 1:
            raise ValueError(f"acceptance={self.acceptance} must be in [0, 1)")

    def tokens_per_step(self) -> float:
        """Expected tokens one sequence gains per step: the accepted run of proposals (each
        accepted with probability a until the first rejection) plus the target's own token."""
        a = self.acceptance
        return (1 - a ** (self.tokens + 1)) / (1 - a)

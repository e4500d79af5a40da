"""The estimate's validation table: projections of published configurations beside the published
figures (docs/estimate.md). Every row is projected in its published layout, precision,
recompute and ZeRO settings, with the same model, data files and efficiencies: nothing is set
per row.

    make validate-estimate                       # prints the markdown table of docs/estimate.md
    python testing/estimate_validation.py --rows trn1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field

# A row within this relative error of the published figure meets the target.
TARGET = 0.25

NEURON_TRN1_TRAIN = ("AWS Neuron benchmarks, about-neuron/benchmarks/trn1/training_data_decoder.csv "
                     "(SDK 2.24)")
NEURON_TRN1_NLP = "AWS Neuron benchmarks, about-neuron/benchmarks/trn1/trn1_trn1n_nlp_data.csv"
NEURON_TRN1_INF = ("AWS Neuron benchmarks, about-neuron/benchmarks/trn1/latency_data_decoder.csv "
                   "(transformers-neuronx, SDK 2.18)")
NEURON_TRN1_THR = ("AWS Neuron benchmarks, about-neuron/benchmarks/trn1/throughput_data_decoder.csv "
                   "(transformers-neuronx, SDK 2.18)")
NXDI_405B = ("NxD Inference tutorial, libraries/nxd-inference/tutorials/llama405b_perf_comparison.csv "
             "(vLLM + LLMPerf, 10k in / 1.5k out, BS 1)")
NXDI_BUCKETS = (12288, 12800)  # the tutorials' --max-context-length, --seq-len
def tnx_buckets(prompt: int, output: int) -> tuple:
    """transformers-neuronx's default buckets for a model compiled with n_positions = the
    benchmark's input + output length (its bucket module: token-generation buckets are powers of
    two from 128 up to n_positions, context-encoding buckets half of each). For a power-of-two
    n_positions these are the automatic buckets up to (n_positions / 2, n_positions)."""
    n_positions = prompt + output
    return (n_positions // 2, n_positions)


NXDI_70B = ("NxD Inference tutorial, libraries/nxd-inference/tutorials/llama70b_perf_comparison.csv "
            "(vLLM + LLMPerf, 10k in / 1.5k out, BS 1)")
TRTLLM_061 = ("TensorRT-LLM docs/source/performance.md (v0.6.1, H100 SXM, FP8 weights and KV cache, "
              "gptSessionBenchmark static batch)")
TRTLLM_05 = "TensorRT-LLM docs/source/performance.md (v0.5, H100 SXM, FP8, batch 1 first-token latency)"
NEMO_AUTOMODEL = ("NeMo AutoModel performance summary (DGX-H100, BF16, TE + fsdp2_prefetch): 866.77 "
                  "tok/s/GPU, 18.90 s per step, 389 model TFLOP/s/GPU")


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    workload: str          # "train", "inference"
    instance: str
    layout: str
    metric: str            # "tokens_per_s" (cluster), "tpot_ms", "ttft_ms", "output_tokens_per_s_per_gpu"
    published: float
    source: str
    batch: int = 1
    seq_len: int = 2048
    prompt: int = 128
    output: int = 128
    weights: str = "bf16"
    kv_cache: str = "bf16"
    fp8: bool = False
    draft: str | None = None
    speculation: int = 0
    async_host: bool = False
    prefill_batch: int = 1
    buckets: tuple = ()
    dtype: str = "bfloat16"
    note: str = ""
    group: str = "trn"     # which --rows selects it
    tags: tuple = field(default_factory=tuple)


# Trn1 training (32 x trn1.32xlarge = 1,024 NeuronCores unless said; BF16 autocast, FP32
# optimizer state). NxD's Llama recipes run sequence parallelism and selective activation
# checkpointing (training_llama_tp_zero1 / training_llama_tp_pp tutorials); NeMo-Megatron's
# recipes on Neuron run selective recompute too. The Llama-2 rows' CSV topology says DP=4, which
# with TP8 PP4 covers 128 of the 1,024 cores it reports; the MFU it publishes (20.7%, 14.8%)
# is that of all 1,024, so DP is 32.
CASES = [
    Case("Llama-3.1-8B pretraining, 32 x trn1, TP32 DP32 ZeRO-1, selective recompute, seq 8192, GBS 1024",
         "llama-3.1-8b", "train", "trn1.32xlarge", "tp=32,dp=32,zero1,ac=selective,mb=32",
         "tokens_per_s", 47.95 * 8192, NEURON_TRN1_TRAIN + ": 47.95 seq/s", seq_len=8192,
         group="trn-train"),
    Case("Llama-3.1-70B pretraining, 32 x trn1, TP32 PP8 DP4, selective recompute, seq 8192, GBS 1024",
         "llama-3.1-70b", "train", "trn1.32xlarge", "tp=32,pp=8,dp=4,ac=selective,mb=256",
         "tokens_per_s", 7.94 * 8192, NEURON_TRN1_TRAIN + ": 7.94 seq/s", seq_len=8192,
         group="trn-train"),
    Case("GPT3-175B pretraining (NeMo), 32 x trn1, TP32 PP8 DP4, selective recompute, seq 2048, GBS 1024",
         "gpt3-175b", "train", "trn1.32xlarge", "tp=32,pp=8,dp=4,ac=selective,mb=256",
         "tokens_per_s", 12.7 * 2048, NEURON_TRN1_NLP + ": 12.7 seq/s (33.14% MFU)", seq_len=2048,
         group="trn-train"),
    Case("Llama2-7B pretraining (NxD), 16 x trn1, TP8 DP64, selective recompute, seq 4096, GBS 1024",
         "llama-2-7b", "train", "trn1.32xlarge", "tp=8,dp=64,zero1,ac=selective,mb=16",
         "tokens_per_s", 81 * 4096, NEURON_TRN1_NLP + ": 81 seq/s (30.8% MFU)", seq_len=4096,
         group="trn-train"),
    Case("Llama2-13B pretraining (NeMo), 32 x trn1, TP8 PP4 DP32, selective recompute, seq 4096, GBS 1024",
         "llama-2-13b", "train", "trn1.32xlarge", "tp=8,pp=4,dp=32,ac=selective,mb=32",
         "tokens_per_s", 60 * 4096, NEURON_TRN1_NLP + ": 60 seq/s (20.7% MFU)", seq_len=4096,
         group="trn-train"),
    Case("Llama2-7B pretraining (NeMo), 32 x trn1, TP8 PP4 DP32, selective recompute, seq 4096, GBS 1024",
         "llama-2-7b", "train", "trn1.32xlarge", "tp=8,pp=4,dp=32,ac=selective,mb=32",
         "tokens_per_s", 82 * 4096, NEURON_TRN1_NLP + ": 82 seq/s (14.8% MFU)", seq_len=4096,
         group="trn-train"),
    Case("BERT-Large phase-1 pretraining, 1 x trn1, DP32, seq 128, micro-batch 16, GBS 16384",
         "bert-large", "train", "trn1.32xlarge", "dp=32,mb=32", "tokens_per_s", 3530 * 128,
         NEURON_TRN1_NLP + ": 3,530 seq/s (27.49% MFU), AdamW", batch=16, seq_len=128,
         group="trn-train"),
    # Trn1 inference: transformers-neuronx, TP32 on one trn1.32xlarge, FP16 model with BF16
    # matmuls (projected as bf16: the same bytes and rates), a synchronous generation loop,
    # compiled for the benchmark's input + output length with the library's default buckets.
    Case("Llama-2-7B decode, 1 x trn1, TP32, BS 1, 128 in / 8064 out", "llama-2-7b", "inference",
         "trn1.32xlarge", "tp=32", "tpot_ms", 6.6996, NEURON_TRN1_INF + ": TPOT P50 6.70 ms",
         prompt=128, output=8064, buckets=tnx_buckets(128, 8064),
         group="trn-infer"),
    Case("Mistral-7B decode, 1 x trn1, TP32, BS 1, 8192 in / 8192 out", "mistral-7b", "inference",
         "trn1.32xlarge", "tp=32", "tpot_ms", 9.892, NEURON_TRN1_INF + ": TPOT P50 9.89 ms",
         prompt=8192, output=8192, buckets=tnx_buckets(8192, 8192),
         group="trn-infer"),
    Case("Mistral-7B prefill, 1 x trn1, TP32, BS 1, 8192 in", "mistral-7b", "inference",
         "trn1.32xlarge", "tp=32", "ttft_ms", 1322.9, NEURON_TRN1_INF + ": TTFT P50 1,323 ms",
         prompt=8192, output=8192, buckets=tnx_buckets(8192, 8192),
         group="trn-infer"),
    Case("Llama-2-70B decode, 1 x trn1, TP32, BS 1, 128 in / 128 out", "llama-2-70b", "inference",
         "trn1.32xlarge", "tp=32", "tpot_ms", 25.18, NEURON_TRN1_INF + ": TPOT P50 25.18 ms",
         prompt=128, output=128, buckets=tnx_buckets(128, 128),
         group="trn-infer"),
    Case("Llama-3-70B prefill, 1 x trn1, TP32, BS 1, 2048 in", "llama-3-70b", "inference",
         "trn1.32xlarge", "tp=32", "ttft_ms", 547.0, NEURON_TRN1_INF + ": TTFT P50 547 ms",
         prompt=2048, output=2048, buckets=tnx_buckets(2048, 2048),
         group="trn-infer"),
    Case("Llama-3-8B decode, int8 weights, 1 x trn1, TP32, BS 8, 128 in / 8064 out", "llama-3-8b",
         "inference", "trn1.32xlarge", "tp=32", "tpot_ms", 9.95,
         NEURON_TRN1_THR + ": TPOT P50 9.95 ms", batch=8, prompt=128, output=8064, weights="int8",
         buckets=tnx_buckets(128, 8064), group="trn-infer"),
    # Trn2 inference: NxD Inference on one trn2.48xlarge (64 logical cores, LNC 2), served by
    # vLLM (no async mode in the tutorial's configuration), BF16, compiled as the tutorials say
    # (--max-context-length 12288 --seq-len 12800 --enable-bucketing): the 10k prompt runs in
    # the 12,288-token context-encoding bucket, decode in the 12,800-position bucket.
    Case("Llama-3.1-405B decode, 1 x trn2, TP64, BS 1, 10k in / 1.5k out", "llama-3.1-405b",
         "inference", "trn2.48xlarge", "tp=64", "tpot_ms", 37.9, NXDI_405B + ": TPOT P50 37.9 ms",
         prompt=10240, output=1536, buckets=NXDI_BUCKETS, group="trn-infer"),
    Case("Llama-3.1-405B prefill, 1 x trn2, TP64, BS 1, 10k in", "llama-3.1-405b", "inference",
         "trn2.48xlarge", "tp=64", "ttft_ms", 2442, NXDI_405B + ": TTFT P50 2,442 ms",
         prompt=10240, output=1536, buckets=NXDI_BUCKETS, group="trn-infer"),
    Case("Llama-3.3-70B decode, 1 x trn2, TP64, BS 1, 10k in / 1.5k out", "llama-3.3-70b",
         "inference", "trn2.48xlarge", "tp=64", "tpot_ms", 19.6, NXDI_70B + ": TPOT P50 19.6 ms",
         prompt=10240, output=1536, buckets=NXDI_BUCKETS, group="trn-infer"),
    Case("Llama-3.3-70B prefill, 1 x trn2, TP64, BS 1, 10k in", "llama-3.3-70b", "inference",
         "trn2.48xlarge", "tp=64", "ttft_ms", 814.2, NXDI_70B + ": TTFT P50 814 ms",
         prompt=10240, output=1536, buckets=NXDI_BUCKETS, group="trn-infer"),
    Case("Llama-3.3-70B fused speculation (Llama-3.2-1B draft, 7 tokens), 1 x trn2, TP64, BS 1",
         "llama-3.3-70b", "inference", "trn2.48xlarge", "tp=64", "tpot_ms", 5.3,
         NXDI_70B + ": TPOT P50 5.3 ms with fused speculation", prompt=10240, output=1536,
         buckets=NXDI_BUCKETS,
         draft="llama-3.2-1b", speculation=7, group="trn-infer",
         note="acceptance rate not published: the documented default"),
    # Published GPU results.
    Case("Llama-3-70B pretraining BF16, 64 x H100 (8 DGX-H100), FSDP32 CP2, full recompute, seq 8192, GBS 128",
         "llama-3.1-70b", "train", "dgx-h100", "cp=2,dp=32,fsdp,ac,mb=4", "tokens_per_s", 866.77 * 64,
         NEMO_AUTOMODEL, seq_len=8192, group="gpu",
         note="the table does not say whether activations are recomputed; without it the layout "
              "does not fit (80 GB)"),
    Case("LLaMA-2-7B FP8 serving, 1 x H100, TP1, static batch 48, 2048 in / 2048 out", "llama-2-7b",
         "inference", "dgx-h100", "tp=1", "output_tokens_per_s_per_gpu", 2740,
         TRTLLM_061 + ": 2,740 output tok/s/GPU", batch=48, prompt=2048, output=2048,
         weights="fp8", kv_cache="fp8", prefill_batch=48, async_host=True, group="gpu"),
    Case("LLaMA-2-70B FP8 serving, 2 x H100, TP2, static batch 64, 2048 in / 2048 out", "llama-2-70b",
         "inference", "dgx-h100", "tp=2", "output_tokens_per_s_per_gpu", 547,
         TRTLLM_061 + ": 547 output tok/s/GPU", batch=64, prompt=2048, output=2048,
         weights="fp8", kv_cache="fp8", prefill_batch=64, async_host=True, group="gpu"),
    Case("LLaMA-2-70B FP8 first token, 4 x H100, TP4, BS 1, 2048 in", "llama-2-70b", "inference",
         "dgx-h100", "tp=4", "ttft_ms", 109, TRTLLM_05 + ": 109 ms", prompt=2048, output=1,
         weights="fp8", kv_cache="fp8", async_host=True, group="gpu"),
    Case("LLaMA-2-7B FP8 first token, 1 x H100, TP1, BS 1, 2048 in", "llama-2-7b", "inference",
         "dgx-h100", "tp=1", "ttft_ms", 36, TRTLLM_05 + ": 36 ms", prompt=2048, output=1,
         weights="fp8", kv_cache="fp8", async_host=True, group="gpu"),
]


def project(case: Case):
    """(projected value, the main projection dict, notes)."""
    from torch_neuronx.estimate import Layout, Speculation, estimate

    spec = Speculation(case.draft, tokens=case.speculation) if case.draft else None
    e = estimate(case.model, workload=case.workload, instance=case.instance,
                 layout=Layout.parse(case.layout), compare=(), batch=case.batch,
                 seq_len=case.seq_len, prompt=case.prompt, output=case.output, fp8=case.fp8,
                 weights=case.weights, kv_cache=case.kv_cache, speculation=spec,
                 async_host=case.async_host, prefill_batch=case.prefill_batch,
                 buckets=case.buckets, dtype=case.dtype)
    t = e.targets[0]
    p = t.projection
    if case.metric == "tokens_per_s":
        value = p["tokens_per_s"]
    elif case.metric == "mfu":
        value = p["mfu"]
    elif case.metric == "tpot_ms":
        value = t.request["tpot_s"] * 1e3
    elif case.metric == "ttft_ms":
        value = t.request["ttft_s"] * 1e3
    elif case.metric == "output_tokens_per_s_per_gpu":
        value = t.request["output_tokens_per_s"] / p["ranks"]
    else:
        raise ValueError(f"unknown metric {case.metric!r}")
    main = t.prefill if case.metric == "ttft_ms" else p
    return value, main, t


def _fmt(metric: str, v: float) -> str:
    if metric in ("tpot_ms", "ttft_ms"):
        return f"{v:,.1f} ms"
    if metric == "mfu":
        return f"{100 * v:.1f}%"
    if metric == "output_tokens_per_s_per_gpu":
        return f"{v:,.0f} tok/s/GPU"
    return f"{v:,.0f} tok/s"


def rows(groups=None, progress=None):
    out = []
    for case in CASES:
        if groups and not any(case.group.startswith(g) for g in groups):
            continue
        start = time.perf_counter()
        value, p, t = project(case)
        out.append(dict(case=case, value=value, error=value / case.published - 1, bound=p["bound"],
                        mfu=p["mfu"], fits=t.fits, seconds=time.perf_counter() - start,
                        hbm=t.hbm_bytes, capacity=t.capacity))
        if progress:
            progress(f"{case.name}: {_fmt(case.metric, value)} vs {_fmt(case.metric, case.published)}")
    return out


def table(results) -> str:
    lines = ["| configuration | published | projected | error | bound | HBM per rank | source |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        c = r["case"]
        mark = "" if abs(r["error"]) <= TARGET else " **(outside ±25%)**"
        lines.append(f"| {c.name} | {_fmt(c.metric, c.published)} | {_fmt(c.metric, r['value'])} | "
                     f"{100 * r['error']:+.0f}%{mark} | {r['bound']} | "
                     f"{r['hbm'] / 2**30:.1f} / {r['capacity'] / 2**30:.0f} GiB | {c.source} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="", help="comma-separated groups: trn-train, trn-infer, gpu")
    parser.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    groups = [g for g in args.rows.split(",") if g]
    results = rows(groups, progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(table(results))
    inside = sum(abs(r["error"]) <= TARGET for r in results)
    print(f"\n{inside} of {len(results)} rows within ±{TARGET:.0%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(name=r["case"].name, published=r["case"].published, projected=r["value"],
                            error=r["error"], bound=r["bound"], seconds=r["seconds"]) for r in results],
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

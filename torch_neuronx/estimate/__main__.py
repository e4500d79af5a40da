"""python -m torch_neuronx.estimate MODEL [options]: project a training step or inference requests
of a model onto a Trainium instance and the GPUs compared; print the table, write a PNG chart, an
HTML page and the JSON. --search tries every layout the instances allow instead.

MODEL is a preset (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, llama-3.3-70b, llama-2-7b,
qwen3-30b-a3b, qwen3-235b-a22b, tiny-llama, ...), a config.json (or a directory holding one), or
--script PATH: a user's script run on neuron (as it is, at its own sizes), whose ops are traced
and projected onto one rank of the instance.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time

import torch


def _parse_prices(items):
    prices = {}
    for item in items or []:
        name, _, value = item.partition("=")
        try:
            prices[name] = float(value)
        except ValueError:
            raise SystemExit(f"--price {item!r}: use INSTANCE=USD_PER_HOUR, e.g. trn2.48xlarge=48.0")
    return prices


def _parse_buckets(text):
    if not text:
        return ()
    try:
        max_context, seq_len = (int(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"--buckets {text!r}: use MAX_CONTEXT,SEQ_LEN, e.g. 12288,12800")
    return (max_context, seq_len)


class _Progress:
    """Progress lines on stderr for runs longer than a moment."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.start:6.1f} s] {message}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    from torch_neuronx.estimate import (DEFAULT_ACCEPTANCE, PRESETS, Layout, LayoutError, Speculation,
                                        estimate, instances, search)

    parser = argparse.ArgumentParser(prog="python -m torch_neuronx.estimate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help=f"preset ({', '.join(sorted(PRESETS))}) or config.json")
    parser.add_argument("--script", help="a Python script to run on neuron and project instead of a model")
    parser.add_argument("--tokens", type=float, default=0,
                        help="tokens the script processes per run (for tokens/s and $ per 1M tokens)")
    parser.add_argument("--workload", choices=("train", "inference", "decode", "prefill"), default="train")
    parser.add_argument("--instance", default="trn2.48xlarge")
    parser.add_argument("--compare", default="p5.48xlarge,p5en.48xlarge",
                        help="comma-separated instances to compare ('' for none)")
    parser.add_argument("--layout", default="",
                        help="e.g. 'tp=8,pp=2,dp=4,zero1,ac=selective,mb=8' or 'tp=64,adp=8,ep=32'")
    parser.add_argument("--gpu-layout", default=None,
                        help="layout for the compared GPU instances (default: searched)")
    parser.add_argument("--gpu-objective", choices=("latency", "cost"), default=None,
                        help="how the GPU layout is chosen (default: cost to train, latency to serve)")
    parser.add_argument("--batch", type=int, default=1,
                        help="train: sequences per micro-batch; inference: sequences decoded together")
    parser.add_argument("--seq-len", type=int, default=2048, help="train: tokens per sequence")
    parser.add_argument("--prompt", type=int, default=2048, help="inference: input tokens per request")
    parser.add_argument("--output", type=int, default=256, help="inference: generated tokens per request")
    parser.add_argument("--context", type=int, default=0,
                        help="decode: KV cache positions (default: prompt + output / 2)")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--weights", choices=("bf16", "fp8", "int8"), default="bf16",
                        help="inference: weights as stored (fp8: FP8 matmuls too; int8: 16-bit matmuls)")
    parser.add_argument("--kv-cache", choices=("bf16", "fp8"), default="bf16",
                        help="inference: KV cache as stored")
    parser.add_argument("--prefill-batch", type=int, default=1,
                        help="inference: requests prefilled together (1: one at a time; --batch: static batching)")
    parser.add_argument("--buckets", default=None, metavar="MAX_CONTEXT,SEQ_LEN",
                        help="inference: NxD Inference's automatic buckets up to these lengths (the "
                             "prompt padded to its context-encoding bucket, decode over its "
                             "token-generation bucket; transformers-neuronx's defaults for "
                             "n_positions N, a power of two: N/2,N)")
    parser.add_argument("--draft", default=None, help="inference: draft model for speculative decoding")
    parser.add_argument("--speculation", type=int, default=4, help="draft tokens proposed per step")
    parser.add_argument("--acceptance", type=float, default=DEFAULT_ACCEPTANCE,
                        help=f"per-token acceptance rate of the draft's proposals (default {DEFAULT_ACCEPTANCE})")
    parser.add_argument("--unfused-speculation", action="store_true",
                        help="the draft runs as programs of its own (default: fused, as NxD Inference)")
    parser.add_argument("--sync-host", action="store_true",
                        help="inference: a host loop that waits for each step (no asynchronous runtime)")
    parser.add_argument("--eager", action="store_true", help="one launch per op instead of compiled programs")
    parser.add_argument("--fp8", action="store_true",
                        help="train: 16-bit matmuls at the FP8 rate (FP8 training of the GEMMs)")
    parser.add_argument("--allow-overcommit", action="store_true",
                        help="project a layout that does not fit in HBM anyway (marked OVER-COMMITTED)")
    parser.add_argument("--search", action="store_true",
                        help="try every layout the instances (--instance and --compare) allow")
    parser.add_argument("--instances", type=int, default=1, help="--search: instances of each type")
    parser.add_argument("--global-batch", type=int, default=None,
                        help="--search (train): sequences per optimizer step (default: --batch)")
    parser.add_argument("--max-batch", type=int, default=None,
                        help="--search (inference): try batches 1, 2, 4, ... up to this")
    parser.add_argument("--price", action="append", metavar="INSTANCE=USD",
                        help="override an instance's hourly price")
    parser.add_argument("--data", default=None, help="estimate data file (default: the shipped estimate.ini)")
    parser.add_argument("--out-dir", default=None, help="write the chart, estimate.html and the JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--list-instances", action="store_true")
    args = parser.parse_args(argv)

    if args.list_instances:
        for name, info in sorted(instances(args.data).items()):
            price = f"${info['price_usd_per_hour']:.2f}/h" if info["price_usd_per_hour"] else "no price"
            print(f"{name:16} {info['devices']:3} x {info['accelerator']:10} {info['ranks']:4} ranks "
                  f"{info['hbm_bytes_per_rank'] / 2**30:6.1f} GiB/rank {price:12} {info['price_source']}")
        return 0
    compare = [c for c in args.compare.split(",") if c]
    progress = _Progress(args.quiet)
    speculation = None
    if args.draft:
        speculation = Speculation(args.draft, tokens=args.speculation, acceptance=args.acceptance,
                                  fused=not args.unfused_speculation)
    common = dict(batch=args.batch, seq_len=args.seq_len, context=args.context, prompt=args.prompt,
                  output=args.output, dtype=getattr(torch, args.dtype), compiled=not args.eager,
                  fp8=args.fp8, weights=args.weights, speculation=speculation,
                  async_host=not args.sync_host, kv_cache=args.kv_cache,
                  prefill_batch=args.prefill_batch, buckets=_parse_buckets(args.buckets),
                  data=args.data, prices=_parse_prices(args.price),
                  progress=progress)
    try:
        if args.script:
            from torch_neuronx.estimate._script import estimate_script

            e = estimate_script(args.script, instance=args.instance, compare=compare,
                                tokens=args.tokens, compiled=not args.eager, data=args.data,
                                prices=_parse_prices(args.price), run=runpy.run_path)
        elif not args.model:
            parser.error("give a MODEL (preset or config.json) or --script PATH")
        elif args.search:
            return _search(args, compare, common, search)
        else:
            e = estimate(
                args.model, workload=args.workload, instance=args.instance,
                layout=Layout.parse(args.layout), compare=compare,
                gpu_layout=Layout.parse(args.gpu_layout) if args.gpu_layout is not None else None,
                gpu_objective=args.gpu_objective, allow_overcommit=args.allow_overcommit, **common)
    except (ValueError, LayoutError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(e.summary())
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        png = e.write_png(os.path.join(args.out_dir, "estimate.png"))
        page = e.write_html(os.path.join(args.out_dir, "estimate.html"), png=png)
        with open(os.path.join(args.out_dir, "estimate.json"), "w") as f:
            f.write(e.to_json())
        print(f"\nwrote {png}, {page} and estimate.json")
    return 0


def _search(args, compare, common, search) -> int:
    from torch_neuronx.estimate._report import search_summary, write_search_png

    batches = None
    if args.max_batch and args.workload != "train":
        batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if b <= args.max_batch]
    start = time.perf_counter()
    results = search(args.model, workload=args.workload, instances_to_try=[args.instance, *compare],
                     count=args.instances, global_batch=args.global_batch, batches=batches, **common)
    tried = sum(r.tried for r in results.values())
    print(f"{args.model}: {args.workload}, {tried} layouts tried in {time.perf_counter() - start:.1f} s")
    workload = next(iter(results.values()))
    from torch_neuronx.estimate._project import Workload

    w = Workload(kind=args.workload, batch=args.batch, seq_len=args.seq_len, prompt=args.prompt,
                 output=args.output, context=args.context, buckets=_parse_buckets(args.buckets))
    print(search_summary(results, w))
    if args.out_dir:
        png = write_search_png(results, w, os.path.join(args.out_dir, "search.png"))
        print(f"\nwrote {png}")
    return 0 if any(r.fitting for r in results.values()) else 2


if __name__ == "__main__":
    sys.exit(main())

"""python -m torch_neuronx.estimate MODEL [options]: project a training or decode step of a model
onto a Trainium instance and the GPUs compared; print the table, write a PNG chart, an HTML page
and the JSON.

MODEL is a preset (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, llama-3.3-70b, llama-2-7b,
qwen3-30b-a3b, qwen3-235b-a22b, tiny-llama), a config.json (or a directory holding one), or
--script PATH: a user's script run on neuron (as it is, at its own sizes), whose ops are traced
and projected onto one rank of the instance.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

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


def main(argv=None) -> int:
    from torch_neuronx.estimate import PRESETS, Layout, estimate, instances

    parser = argparse.ArgumentParser(prog="python -m torch_neuronx.estimate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help=f"preset ({', '.join(sorted(PRESETS))}) or config.json")
    parser.add_argument("--script", help="a Python script to run on neuron and project instead of a model")
    parser.add_argument("--tokens", type=float, default=0,
                        help="tokens the script processes per run (for tokens/s and $ per 1M tokens)")
    parser.add_argument("--workload", choices=("train", "decode"), default="train")
    parser.add_argument("--instance", default="trn2.48xlarge")
    parser.add_argument("--compare", default="p5.48xlarge,p5en.48xlarge",
                        help="comma-separated instances to compare ('' for none)")
    parser.add_argument("--layout", default="", help="e.g. 'tp=8,cp=2,pp=2,dp=4,fsdp,mb=8'")
    parser.add_argument("--gpu-layout", default=None, help="layout for the compared GPU instances")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--eager", action="store_true", help="one launch per op instead of compiled programs")
    parser.add_argument("--fp8", action="store_true",
                        help="16-bit matmuls at the FP8 rate (FP8 training of the GEMMs)")
    parser.add_argument("--price", action="append", metavar="INSTANCE=USD",
                        help="override an instance's hourly price")
    parser.add_argument("--data", default=None, help="estimate data file (default: the shipped estimate.ini)")
    parser.add_argument("--out-dir", default=None, help="write estimate.png, estimate.html, estimate.json here")
    parser.add_argument("--list-instances", action="store_true")
    args = parser.parse_args(argv)

    if args.list_instances:
        for name, info in sorted(instances(args.data).items()):
            price = f"${info['price_usd_per_hour']:.2f}/h" if info["price_usd_per_hour"] else "no price"
            print(f"{name:16} {info['devices']:3} x {info['accelerator']:10} {price:12} {info['price_source']}")
        return 0
    compare = [c for c in args.compare.split(",") if c]
    try:
        if args.script:
            from torch_neuronx.estimate._script import estimate_script

            e = estimate_script(args.script, instance=args.instance, compare=compare,
                                tokens=args.tokens, compiled=not args.eager, data=args.data,
                                prices=_parse_prices(args.price), run=runpy.run_path)
        else:
            if not args.model:
                parser.error("give a MODEL (preset or config.json) or --script PATH")
            e = estimate(
                args.model, workload=args.workload, instance=args.instance,
                layout=Layout.parse(args.layout), compare=compare,
                gpu_layout=Layout.parse(args.gpu_layout) if args.gpu_layout is not None else None,
                batch=args.batch, seq_len=args.seq_len, context=args.context,
                dtype=getattr(torch, args.dtype), compiled=not args.eager, fp8=args.fp8,
                data=args.data, prices=_parse_prices(args.price))
    except ValueError as error:
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


if __name__ == "__main__":
    sys.exit(main())

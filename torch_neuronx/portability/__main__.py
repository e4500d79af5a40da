"""``python -m torch_neuronx.portability [options] script.py [script args]``: run the script on
neuron and report what would differ on TorchNeuron 2.33.

Exit status: the script's own when it fails; otherwise 1 in strict mode with findings, else 0.
The text report goes to stderr (the script keeps stdout), JSON to ``--json PATH`` (``-`` for
stdout). Under torchrun, ``torchrun ... -m torch_neuronx.portability train.py`` checks every rank
(``--json report.{rank}.json`` writes one file each).
"""

import argparse
import os
import sys
import traceback

from torch_neuronx import _env
from torch_neuronx.portability import run_script
from torch_neuronx.portability.session import STRICT_ENV, ignore_rules, strict_from_env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_neuronx.portability",
        description="Run a script on the neuron device and list what would differ on "
                    "TorchNeuron 2.33, with the file:line in your code and what to change.")
    parser.add_argument("--strict", action="store_true", default=None,
                        help=f"exit with status 1 when anything would differ (also {STRICT_ENV}=1)")
    parser.add_argument("--json", metavar="PATH",
                        help="write the report as JSON to PATH ('-' for stdout); '{rank}' in "
                             "PATH becomes the process's RANK (one file per rank under torchrun)")
    parser.add_argument("--ignore", action="append", metavar="CATEGORY[:SUBJECT]",
                        help="accept these findings (repeatable, or comma-separated), e.g. "
                             "cpu_fallback:aten::normal_ (also TORCH_NEURONX_PORTABILITY_IGNORE)")
    parser.add_argument("--quiet", action="store_true", help="no text report on stderr")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    options = parser.parse_args(argv)
    strict = strict_from_env() if options.strict is None else options.strict
    try:
        ignore = ignore_rules(",".join(options.ignore) if options.ignore else None)
    except ValueError as bad:
        parser.error(str(bad))
    if not os.path.isfile(options.script):
        parser.error(f"no script at {options.script!r}")

    report, error = run_script(options.script, options.args, strict, ignore)
    if error is not None and not isinstance(error, SystemExit):
        # The traceback from the script's own frames on (not this runner's or runpy's).
        tb = error.__traceback__
        script = os.path.abspath(options.script)
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
            tb = tb.tb_next
        traceback.print_exception(type(error), error, tb or error.__traceback__, file=sys.stderr)
    if not options.quiet:
        print(report.text(), file=sys.stderr)
    if options.json:
        text = report.to_json()
        if options.json == "-":
            print(text)
        else:
            path = options.json.replace("{rank}", _env.foreign("RANK") or "0")
            with open(path, "w") as handle:
                handle.write(text + "\n")
    if error is not None:
        if isinstance(error, SystemExit):
            return error.code if isinstance(error.code, int) else 1
        return 1
    if strict and report.warnings:
        print(f"portability: strict mode: {len(report.warnings)} finding(s) would differ on "
              f"TorchNeuron 2.33", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

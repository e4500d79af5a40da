"""Regenerate ``torch_neuronx/data/torchneuron_2_33_coverage.json`` from a TorchNeuron source tree.

TorchNeuron's published per-operator table (``docs/torch_api_compatibility.md`` in
aws-neuron/torch-neuronx) was not retrievable when this file was written, so the coverage is
read from the registrations in the source itself, the way its dispatcher sees them:

- ``@register_aten([...])`` in ``python_ops/torch_mlir/ops/*.py`` (the default lowering path,
  ``TORCH_NEURONX_MLIR_ATEN_OPS=1``, finalised at import),
- ``@neuron_op`` / ``@neuron_unary_op`` / ... decorators in the modules that
  ``auto_registration.discover_all_implementations`` imports (it skips ``legacy`` and ``jax``),
- ``aten_lib.impl("<op>", ..., "PrivateUse1")`` calls in ``python_ops/__init__.py``,
- ``m.impl("<op>", ...)`` inside ``TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)`` in the C++,
- the explicit CPU-fallback registrations of ``python_ops/cpu_fallback_registrations.py``
  (native in name only: they run on the CPU, so they are listed as fallbacks).

A name without an overload (``aten::relu``) is the default overload, as ``Library.impl`` reads
it. Usage: ``python tools/build_torchneuron_coverage.py SRC_ROOT COMMIT DATE > out.json``
where SRC_ROOT holds the ``torch_neuronx`` package of the TorchNeuron tree (a checkout).
"""

import ast
import json
import pathlib
import re
import sys

_DECORATORS = {"register_aten", "neuron_op", "neuron_unary_op", "neuron_binary_op",
               "neuron_reduction_op", "neuron_comparison_op"}


def _decorator_name(node) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    return getattr(func, "id", "")


def _aten_strings(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) \
                and sub.value.startswith("aten::"):
            yield sub.value


def _skipped_module(rel: str) -> bool:
    # auto_registration skips these packages; JAX registrations are finalised nowhere on the
    # default (torch-mlir) path.
    parts = rel.split("/")
    return "legacy" in parts or "jax" in parts


def collect(src_root: pathlib.Path) -> dict:
    package = src_root / "torch_neuronx"
    native: dict = {}
    fallback: dict = {}
    skipped: dict = {}  # registered in legacy/ or jax/ modules, which the default path never loads

    def add(table, op, origin):
        table.setdefault(op, set()).add(origin)

    for path in sorted((package / "python_ops").rglob("*.py")):
        rel = str(path.relative_to(src_root))
        tree = ast.parse(path.read_text())
        if _skipped_module(str(path.relative_to(package / "python_ops"))):
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    for decorator in node.decorator_list:
                        if _decorator_name(decorator) in _DECORATORS:
                            for op in _aten_strings(decorator):
                                add(skipped, op, rel)
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                for decorator in node.decorator_list:
                    if _decorator_name(decorator) in _DECORATORS:
                        for op in _aten_strings(decorator):
                            add(native, op, rel)
            if (path.name in ("__init__.py", "cpu_fallback_registrations.py")
                    and isinstance(node, ast.Call) and _decorator_name(node) in ("impl",)
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                add(native, "aten::" + node.args[0].value, rel)
        if path.name == "cpu_fallback_registrations.py":
            # ("linalg_qr", torch.ops.aten.linalg_qr.default) pairs: CPU fallbacks by design.
            pairs = r'\(\s*"([a-z_0-9]+)"\s*,\s*torch\.ops\.aten\.'
            for name in re.findall(pairs, path.read_text()):
                add(fallback, "aten::" + name, rel)

    cpp = package / "csrc" / "core" / "NeuronBindings.cpp"
    text = cpp.read_text()
    block = re.search(r"TORCH_LIBRARY_IMPL\(aten,\s*PrivateUse1,\s*m\)\s*\{(.*?)\n\}", text, re.S)
    if block:
        for line in block.group(1).splitlines():
            line = line.strip()
            if line.startswith("//"):
                continue
            match = re.match(r'm\.impl\("([^"]+)"', line)
            if match:
                add(native, "aten::" + match.group(1), str(cpp.relative_to(src_root)))
    silent = re.search(r"VIEW_OPS_WHITELIST\s*=\s*\{(.*?)\};", text, re.S)
    silent_ops = sorted(set(re.findall(r'"(aten::[a-zA-Z_0-9]+)"', silent.group(1)))) \
        if silent else []

    for op in fallback:
        native.pop(op, None)
    # Keep only what the loaded registrations do not cover (exactly, or by an entry without an
    # overload, which covers every overload: see the file's "matching").
    for op in list(skipped):
        if op in native or op.split(".", 1)[0] in native:
            del skipped[op]
    return {
        "native": {op: sorted(origins) for op, origins in sorted(native.items())},
        "cpu_fallback_registered": {op: sorted(o) for op, o in sorted(fallback.items())},
        "silent_fallback_view_ops": silent_ops,
        "registered_but_not_loaded": {op: sorted(o) for op, o in sorted(skipped.items())},
    }


def document(data: dict, commit: str, date: str) -> dict:
    """The data file: the lists from :func:`collect` with where they come from and how to read
    them."""
    return {
        "what": "ATen operators TorchNeuron (torch-neuronx, the native PrivateUse1 backend of "
                "Neuron SDK 2.33) runs on the Neuron device in eager mode; any other ATen op "
                "that reaches the PrivateUse1 dispatch key runs through its CPU fallback (copy "
                "to host, CPU kernel, copy back; one warning per op name, silent for the view "
                "ops listed).",
        "torchneuron_release": "Neuron SDK 2.33.0 (torch-neuronx 2.13.3.0 / 2.14.3.0, 2026-10-19)",
        "source": {
            "repository": "https://github.com/parmoham-aws/test-repo-parmoham (public snapshot "
                          "of the TorchNeuron development tree)",
            "commit": commit,
            "commit_date": date,
            "read_from": [
                "torch_neuronx/python_ops/torch_mlir/ops/*.py (@register_aten, the default "
                "TORCH_NEURONX_MLIR_ATEN_OPS=1 path)",
                "torch_neuronx/python_ops/**/*.py outside legacy/ and jax/ (@neuron_op and its "
                "unary/binary/reduction/comparison variants, as auto_registration imports them)",
                "torch_neuronx/python_ops/__init__.py (aten_lib.impl(..., 'PrivateUse1'))",
                "torch_neuronx/csrc/core/NeuronBindings.cpp (TORCH_LIBRARY_IMPL(aten, "
                "PrivateUse1) and the silent VIEW_OPS_WHITELIST of the CPU fallback)",
                "torch_neuronx/python_ops/cpu_fallback_registrations.py (linalg ops registered "
                "as explicit CPU fallbacks)",
            ],
            "generator": "python tools/build_torchneuron_coverage.py SRC_ROOT COMMIT "
                         "DATE > torch_neuronx/data/torchneuron_2_33_coverage.json",
            "why_not_the_release_table": "The per-API table TorchNeuron publishes for each "
                "release (docs/torch_api_compatibility.md in aws-neuron/torch-neuronx, linked "
                "from https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/"
                "api/supported-operators.html) could not be retrieved when this file was made; "
                "the 2.33 release may cover ops this April tree does not. Replace 'native' with "
                "the release table's Y/Native rows when available.",
        },
        "matching": "An executed op matches an entry with the same name and overload "
                    "('aten::add.Tensor'). An entry without an overload ('aten::div') matches "
                    "every overload of that op, the way TorchNeuron's own tests check coverage "
                    "by base name (assert_op_runs_on_neuron('aten::div')). Ops with an upstream "
                    "CompositeExplicitAutograd kernel that are not listed run that composite "
                    "kernel on TorchNeuron too, and a structured op's functional form runs its "
                    "out= form: the report checks those parts instead.",
        "native": data["native"],
        "cpu_fallback_registered": data["cpu_fallback_registered"],
        "silent_fallback_view_ops": data["silent_fallback_view_ops"],
        "registered_but_not_loaded_note": "Ops with JAX or legacy XLA implementations in the tree "
            "whose modules the default registration path does not import (auto_registration "
            "skips legacy/ and jax/; the JAX registry is never finalised): CPU fallbacks in "
            "this tree, and the likeliest to be native in a later release.",
        "registered_but_not_loaded": data["registered_but_not_loaded"],
        "dtype_policy": {
            "float64": "computed as float32 (DtypeAutocastContext, kernels/type_converter.py); "
                       "64-bit copies bounce through the CPU (python_ops/cast_policy.py)",
            "int64": "computed as int32, cast back on output",
            "complex": "complex ops decomposed into real ones (TORCH_NEURONX_COMPLEX_DECOMPOSE, "
                       "default on with PyTorch >= 2.13); complex view ops were in the upstream "
                       "xfail lists",
            "memory_format": "only contiguous_format and preserve_format; channels_last raises "
                             "'Neuron tensors only support contiguous or preserve memory format'",
        },
    }


def main(argv) -> None:
    if len(argv) != 4:
        raise SystemExit(f"usage: python tools/build_torchneuron_coverage.py "
                         f"SRC_ROOT COMMIT DATE (got {argv[1:]})")
    root, commit, date = pathlib.Path(argv[1]), argv[2], argv[3]
    print(json.dumps(document(collect(root), commit, date), indent=1))


if __name__ == "__main__":
    main(sys.argv)

"""Extracts the names of the NKI 0.6 API from AWS's published API stubs into
nki/data/api_0_6.json: for each module (nki, nki.language, nki.isa, nki.collectives) and for the
NkiTensor class, every public function, class, constant and method with its parameter names. Only
names and parameter names are kept (the API's surface, to check ours against); no code or text of
the stubs.

    python tools/nki_api_names.py <aws-neuron-sdk checkout>/nki/api

The stubs live in github.com/aws-neuron/aws-neuron-sdk under nki/api/nki/ (Neuron SDK 2.32, NKI
0.6.0); fetch them yourself. nki.typing has no stub there: its names come from AWS's migration
guide (nki/migration/index.rst, "nki.typing module"), which documents ``nt.tensor[shape]``.
"""

from __future__ import annotations

import ast
import json
import os
import sys

MODULES = {
    "nki": "nki/__init__.py",
    "nki.language": "nki/language/__init__.py",
    "nki.isa": "nki/isa/__init__.py",
    "nki.collectives": "nki/collectives/__init__.py",
}


def _params(fn):
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return [n for n in names if n not in ("self", "cls")]


def extract(path):
    tree = ast.parse(open(path).read())
    names = {}
    classes = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            names[node.name] = {"kind": "function", "params": _params(node)}
        elif isinstance(node, ast.ClassDef) and (not node.name.startswith("_")
                                                 or node.name == "_TileSize"):
            if not node.name.startswith("_"):
                names[node.name] = {"kind": "class", "params": []}
            members = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (not item.name.startswith("_")
                                                          or item.name in ("__getitem__",)):
                    kind = "property" if any(getattr(d, "id", "") == "property"
                                             for d in item.decorator_list) else "method"
                    members[item.name] = {"kind": kind, "params": _params(item)}
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members[item.target.id] = {"kind": "attribute", "params": []}
                elif isinstance(item, ast.Assign):
                    for t in item.targets:
                        if isinstance(t, ast.Name) and not t.id.startswith("_"):
                            members[t.id] = {"kind": "attribute", "params": []}
            classes[node.name] = members
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if not node.target.id.startswith("_"):
                names[node.target.id] = {"kind": "constant", "params": []}
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and not t.id.startswith("_"):
                    names[t.id] = {"kind": "constant", "params": []}
    return names, classes


def main(root):
    out = {"source": "AWS Neuron SDK 2.32 API stubs (aws-neuron-sdk nki/api/nki), NKI 0.6.0",
           "modules": {}, "classes": {}}
    for module, rel in MODULES.items():
        names, classes = extract(os.path.join(root, rel))
        out["modules"][module] = names
        for cls, members in classes.items():
            if cls == "NkiTensor":
                out["classes"][f"{module}.{cls}"] = members
            elif cls == "_TileSize":
                out["classes"][f"{module}.tile_size"] = members
    out["modules"]["nki.typing"] = {"tensor": {"kind": "constant", "params": []}}
    dest = os.path.join(os.path.dirname(__file__), "..", "nki", "data", "api_0_6.json")
    with open(dest, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {os.path.normpath(dest)}")


if __name__ == "__main__":
    main(sys.argv[1])

"""docs/nki.md's NKI 0.6 conformance table is the current one (tools/nki_conformance.py
regenerates it from AWS's API names in nki/data/api_0_6.json and from what nki defines), and every
name the table calls implemented or partial is exercised by a test."""

import importlib.util
import os

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _tool():
    spec = importlib.util.spec_from_file_location(
        "nki_conformance", os.path.join(ROOT, "tools", "nki_conformance.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_hold_the_current_table():
    tool = _tool()
    text = open(tool.DOC).read()
    assert tool.BEGIN in text, "run: python tools/nki_conformance.py --write"
    current = text[text.index(tool.BEGIN):text.index(tool.END) + len(tool.END)]
    assert current == tool.markdown(), "docs/nki.md is stale: python tools/nki_conformance.py --write"


def test_no_name_is_missing_and_every_working_name_has_a_test():
    rows = _tool().rows()
    missing = [f"{m}.{n}" for m, n, _, status, _, _ in rows if status == "missing"]
    assert not missing, missing
    untested = [f"{m}.{n}" for m, n, kind, status, _, test in rows
                if status in ("implemented", "partial") and not test
                and kind in ("function", "method", "property")]
    assert not untested, untested

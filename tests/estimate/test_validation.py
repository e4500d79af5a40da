"""The validation table of docs/estimate.md is what the projection gives: a subset of its rows
(one of each kind: training with ZeRO-1 and selective recompute, pipeline-parallel training,
decode, prefill, speculation, a GPU serving row) is projected again and compared with the error
the page records. A change to the model that moves a row shows here, and the page must be
regenerated (`make validate-estimate`) with it."""

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "testing"))
import estimate_validation as validation  # noqa: E402

CHECKED = (
    "Llama-3.1-8B pretraining",
    "Llama-3.1-70B pretraining",
    "Llama-2-7B decode",
    "Llama-3.3-70B prefill",
    "Llama-3.3-70B fused speculation",
    "LLaMA-2-7B FP8 serving",
)


def _documented():
    """configuration -> recorded error (a fraction), from the page's table."""
    with open(os.path.join(ROOT, "docs", "estimate.md")) as f:
        text = f.read()
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4:
            m = re.match(r"([+-]\d+)%", cells[3])
            if m:
                out[cells[0]] = int(m.group(1)) / 100
    return out


DOCUMENTED = _documented()


def test_every_case_is_in_the_page_and_every_row_a_case():
    assert {c.name for c in validation.CASES} == set(DOCUMENTED)


@pytest.mark.parametrize("prefix", CHECKED)
def test_row_matches_the_page(prefix):
    (case,) = [c for c in validation.CASES if c.name.startswith(prefix)]
    value, _, target = validation.project(case)
    assert target.fits  # every row is projected in a layout the tool says fits
    error = value / case.published - 1
    # The page rounds to whole percents.
    assert abs(error - DOCUMENTED[case.name]) <= 0.006, (case.name, error, DOCUMENTED[case.name])

"""pytest plugin of the conformance harness (suites.py): deselects the node ids listed, one per
line, in the file named by CONFORMANCE_DESELECT. The harness resumes a run that a crashing test
killed (a segfault takes the interpreter with it) by deselecting what already ran and the test
that crashed."""

import os


def pytest_collection_modifyitems(config, items):
    path = os.environ.get("CONFORMANCE_DESELECT")
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        skip = {line.strip() for line in f if line.strip()}
    kept, dropped = [], []
    for item in items:
        (dropped if item.nodeid in skip else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

"""The harness module (suites.py) sits beside its tests, not in a package."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

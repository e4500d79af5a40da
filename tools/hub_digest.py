"""Record (or check) the file digest in a local kernels-Hub repository's metadata.json.

`kernels` verifies a build variant's files against the sha256 digest its metadata.json records
and warns when there is none. Run this after editing a file of the example repository:

    .venv/bin/python tools/hub_digest.py examples/nki/hub/nki-rmsnorm/build/torch-neuron
    .venv/bin/python tools/hub_digest.py --check examples/nki/hub/nki-rmsnorm/build/torch-neuron

The hashing is kernels' own (`Digest.hash_variant`), so the recorded digest is the one it checks.
"""

import argparse
import json
import sys
from pathlib import Path

from kernels._rust import Digest, DigestAlgorithm


def variant_digest(variant: Path) -> dict:
    digest = Digest.hash_variant(DigestAlgorithm.SHA256, variant)
    return {"algorithm": "sha256", "files": dict(sorted(digest.files.items()))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variant", type=Path, help="the build variant folder holding metadata.json")
    parser.add_argument("--check", action="store_true", help="fail if the recorded digest is stale")
    args = parser.parse_args(argv)
    path = args.variant / "metadata.json"
    metadata = json.loads(path.read_text())
    wanted = variant_digest(args.variant)
    if args.check:
        if metadata.get("digest") != wanted:
            print(f"{path}: the recorded digest does not match the files; run "
                  f"`tools/hub_digest.py {args.variant}` to record it", file=sys.stderr)
            return 1
        return 0
    metadata["digest"] = wanted
    path.write_text(json.dumps(metadata, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

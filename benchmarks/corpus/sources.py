"""Put each case's upstream files in place, byte for byte, and check them.

The corpus scripts are third-party code: this repository records where each file comes from
(repository, commit, path) and its sha256, never the file itself. This tool copies the files out
of local git snapshots of the upstream repositories (one bare or normal clone per repository,
found as MIRROR/<owner>+<name>/repo, the layout a snapshot fetch leaves), writes them next to the
case's setup_data.py and refuses any whose sha256 differs from cases.json.

    python benchmarks/corpus/sources.py                 # every case
    python benchmarks/corpus/sources.py nanogpt_train   # one case
    python benchmarks/corpus/sources.py --check         # only report what is present and intact

--mirror DIR (env PCOMPILE_CORPUS_MIRROR, default /work/.mirror) names the snapshot root.
Exit status 0 when every requested file is present and intact, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MIRROR = os.environ.get("PCOMPILE_CORPUS_MIRROR", "/work/.mirror")


def load_cases() -> list[dict]:
    return json.loads((HERE / "cases.json").read_text())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _from_mirror(mirror: Path, src: dict) -> bytes | None:
    git_dir = mirror / src["repo"].replace("/", "+") / "repo"
    if not git_dir.exists():
        return None
    r = subprocess.run(["git", "--git-dir", str(git_dir / ".git") if (git_dir / ".git").exists() else str(git_dir),
                        "show", f"{src['commit']}:{src['path']}"], capture_output=True)
    return r.stdout if r.returncode == 0 else None


def materialize(case: dict, mirror: Path, check_only: bool = False) -> list[str]:
    """Returns one problem line per missing or altered file (empty: all good)."""
    problems = []
    for src in case["sources"]:
        dest = HERE / case["cwd"] / src["as"]
        if dest.exists() and sha256(dest.read_bytes()) == src["sha256"]:
            continue
        if dest.exists() and check_only:
            problems.append(f"{dest.relative_to(HERE)}: sha256 differs from cases.json (edited?)")
            continue
        data = None if check_only else _from_mirror(mirror, src)
        if data is None:
            problems.append(f"{dest.relative_to(HERE)}: missing; get {src['repo']}@{src['commit']}:{src['path']}")
            continue
        if sha256(data) != src["sha256"]:
            problems.append(f"{dest.relative_to(HERE)}: upstream bytes do not match the recorded sha256")
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="case names (default: all)")
    ap.add_argument("--mirror", default=DEFAULT_MIRROR)
    ap.add_argument("--check", action="store_true", help="do not copy, only verify")
    args = ap.parse_args(argv)
    cases = load_cases()
    if args.names:
        unknown = set(args.names) - {c["name"] for c in cases}
        if unknown:
            ap.error(f"unknown case(s): {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c["name"] in args.names]
    bad = 0
    for case in cases:
        problems = materialize(case, Path(args.mirror), args.check)
        print(f"{case['name']}: {'ok' if not problems else 'INCOMPLETE'}")
        for p in problems:
            print(f"  {p}")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

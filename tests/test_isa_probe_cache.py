"""A node with an empty local cache and a populated shared tier runs its first CPU graph without
building Inductor's vector-ISA probe (issue 32 item 9: the probe's g++ builds were ~5 of the
~6 s first step of the shared-cache walk-through's nodes 2 and 3) or its precompiled header
(~4 s more on a node whose temp dir is empty too), and a node with another CPU still runs the
probe's load check itself. A node that compiles builds the header before its kernels.

Real processes, a real store with a real shared directory; g++ is a logging pass-through (CXX)
and the child logs torch's dlopen probes (its `python -c ...LoadLibrary` subprocesses), so what
the test counts is what ran.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import child_env

from pcompile import compat

pytestmark = pytest.mark.skipif(compat.by_design("cpu_isa_probe"),
                                reason="torch < 2.14 keeps no .load_ok marker: the probe layer is off there by design")

CHILD = textwrap.dedent("""\
    import json, subprocess, sys
    log = {"load_probes": 0}
    _run = subprocess.run

    def run(cmd, *args, **kwargs):           # instrumentation only: every command still runs
        if isinstance(cmd, list) and any("LoadLibrary" in str(part) for part in cmd):
            log["load_probes"] += 1
        return _run(cmd, *args, **kwargs)

    subprocess.run = run
    if sys.argv[1] != "same":                # a node whose CPU reports other flags
        from pcompile.keys import versions
        versions.cpu_identity = lambda: "x86_64|OtherVendor|another cpu|flags:0000|glibc-2.36"
    import torch
    import pcompile

    fn = torch.compile(lambda x: (x.sin() * 2 + 1).sum(dim=1), backend="pcompile")
    out = fn(torch.arange(64, dtype=torch.float32).reshape(8, 8))
    log["value"] = round(float(out.sum()), 4)
    log["hits"] = pcompile.cache_lookups()
    print("RESULT " + json.dumps(log))
    """)


def _logging_cxx(tmp: Path) -> Path:
    """A g++ that appends its arguments to $CXX_LOG, then runs the real g++ unchanged."""
    script = tmp / "logging-g++"
    script.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$CXX_LOG"\nexec g++ "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _node(tmp: Path, name: str, cpu: str = "same") -> tuple[dict, list[str]]:
    cxx_log = tmp / f"{name}.cxx.log"
    (tmp / f"{name}.tmp").mkdir(exist_ok=True)  # its own temp dir, where Inductor keeps precompiled headers
    env = child_env({"TMPDIR": str(tmp / f"{name}.tmp"),"PCOMPILE_CACHE_DIR": str(tmp / name), "PCOMPILE_SHARED_DIR": str(tmp / "shared"),
                     "CXX": str(_logging_cxx(tmp)), "CXX_LOG": str(cxx_log), "PCOMPILE_EVENTS": "0"})
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "PCOMPILE_REMOTE", "PCOMPILE_READ_ONLY", "PCOMPILE"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-c", CHILD, cpu], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    calls = cxx_log.read_text().splitlines() if cxx_log.exists() else []
    # `-E`: Inductor preprocesses its precompiled header in every process, stock hot included
    builds = [c for c in calls if " -o " in f" {c} " and " -E " not in f" {c} "]
    return json.loads(line[len("RESULT "):]), builds


def test_empty_local_dir_takes_the_probe_from_the_shared_tier(tmp_path: Path) -> None:
    first, first_builds = _node(tmp_path, "node1")
    assert first_builds and first["load_probes"] > 0, "node 1 (cold) should build and load-check the probe"
    header = [i for i, c in enumerate(first_builds) if c.split(" -o ")[-1].split()[0].endswith(".gch")]
    kernels = [i for i, c in enumerate(first_builds) if ".main.cpp" in c]
    assert header and kernels and header[0] < kernels[0], \
        f"node 1's kernels compiled before their precompiled header: {[c[:120] for c in first_builds]}"
    second, second_builds = _node(tmp_path, "node2")
    assert second["value"] == first["value"]
    assert second["hits"][0] == second["hits"][1] > 0, second
    assert second_builds == [], f"node 2 ran g++ although the shared tier held everything: {[c[:160] for c in second_builds]}"
    assert second["load_probes"] == 0, "node 2 re-ran the dlopen probe its CPU model already passed"
    libs = [p for p in (tmp_path / "node2" / "inductor").rglob("*.so") if not p.name.endswith(".main.so")]
    assert libs and all(Path(str(p) + ".load_ok").is_file() for p in libs), libs


def test_another_cpu_runs_the_load_check_itself(tmp_path: Path) -> None:
    first, _ = _node(tmp_path, "node1")
    other, other_builds = _node(tmp_path, "node3", cpu="other")
    assert other["value"] == first["value"]
    assert other_builds == [], f"the probe libraries depend on the compiler, not the CPU: {[c[:160] for c in other_builds]}"
    assert other["load_probes"] == first["load_probes"] > 0, \
        "a host with another CPU was served the load check another CPU passed"

"""What pcompile tells a user is true and agrees everywhere (issue 23).

- one definition of a hit per layer (pcompile/store/hits.py) for stats, report, the warm summary;
- a correct warm set-up prints no warning, a real mismatch one line with what to do;
- `stats` accounts for every byte under the cache dir, `gc` frees or names all of it.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from conftest import run_cli
from pcompile.config import Settings
from pcompile.keys import make_key
from pcompile.store import hits, usage
from pcompile.store.entry import Entry
from pcompile.store.compose import open_store


# -- hits -------------------------------------------------------------------------------------
def _ev(layer: str, outcome: str, **extra: object) -> dict:
    return {"kind": "cache_lookup", "layer": layer, "outcome": outcome, **extra}


def test_one_lookup_per_layer_inner_and_untimed_are_not_misses() -> None:
    t = hits.from_events([_ev("autograd", "hit"), _ev("autograd", "hit"), _ev("kernel", "miss"),
                          _ev("kernel", "miss", inner=True), _ev("autotune", "hit"), _ev("autotune", "untimed"),
                          {"kind": "graph_compile", "outcome": "hit"}])
    assert t["autograd"] == {"hits": 2, "misses": 0, "untimed": 0, "inner": 0, "predicted": 0, "lookups": 2, "rate": 1.0}
    assert t["kernel"]["lookups"] == 1 and t["kernel"]["inner"] == 1 and t["kernel"]["rate"] == 0.0
    assert t["autotune"]["lookups"] == 1 and t["autotune"]["untimed"] == 1 and t["autotune"]["rate"] == 1.0
    assert t["graph"]["rate"] is None and not hits.all_hit(t)
    del t["kernel"]
    assert hits.all_hit(t)
    assert hits.summary(t) == "AOTAutograd 2/2 hit, autotune 1/1 hit, 1 left for the GPU to time (this host cannot)"
    assert hits.summary(hits.table({})) == "no cache look-ups" and not hits.all_hit(hits.table({}))


def test_a_program_miss_is_shown_but_every_compiled_layer_hit_is_still_all_hit() -> None:
    """A job whose program is missing or refused (another option, a frame torch cannot save) traces
    with Dynamo and compiles nothing."""
    t = hits.from_events([_ev("program", "miss"), _ev("graph", "hit"), _ev("autograd", "hit")])
    assert hits.all_hit(t) and "program 0/1 hit" in hits.summary(t)
    assert not hits.all_hit(hits.from_events([_ev("program", "miss")]))  # nothing compiled was asked
    assert not hits.all_hit(hits.from_events([_ev("program", "hit"), _ev("graph", "miss")]))


def test_stats_files_from_before_the_accounting_fold_the_prediction_into_autotune() -> None:
    t = hits.table({"autotune": {"hits": 0, "misses": 48}, "autotune-predicted": {"hits": 35, "misses": 13}})
    assert (t["autotune"]["hits"], t["autotune"]["misses"]) == (35, 13)
    assert "autotune-predicted" not in t or t.get("autotune-predicted", {}).get("lookups", 0) == 0


# -- warnings ---------------------------------------------------------------------------------
def test_a_builtin_profile_never_warns_about_versions() -> None:
    from pcompile.vdev.profile import resolve
    from pcompile.warm.runner import version_warnings

    prof = resolve("h100")
    assert prof.software.get("torch")  # captured with some torch; says nothing about the user's GPU host
    assert version_warnings(prof, {"torch": "0.0.1", "triton": "0.1", "cudnn": 1, "python": "3.0"}) == []


def test_a_captured_profile_of_another_build_is_one_line_with_what_to_do(tmp_path: Path) -> None:
    from pcompile.vdev.profile import BUILTIN_DIR, load
    from pcompile.warm.runner import version_warnings

    mine = tmp_path / "gpu-host.json"
    shutil.copy(BUILTIN_DIR / "h100-sxm5-80gb.json", mine)
    prof = load(mine)
    sw = prof.software
    same = {"torch": sw["torch"], "triton": sw["triton"], "cudnn": sw["cudnn"], "python": sw["python"][:4]}
    assert version_warnings(prof, same) == []
    lines = version_warnings(prof, dict(same, torch="9.9.9", triton="8.8.8"))
    assert len(lines) == 1
    assert "torch 9.9.9, triton 8.8.8" in lines[0] and f"torch {sw['torch']}, triton {sw['triton']}" in lines[0]
    assert "install the GPU host's versions here" in lines[0] and "cudnn" not in lines[0]


# -- every byte -------------------------------------------------------------------------------
def _cache(tmp_path: Path) -> Path:
    root = tmp_path / "c"
    store = open_store(Settings(cache_dir=root, shared_dir=None))
    for i in range(3):
        key, inputs = make_key("kernel", f"src{i}", {"torch": "t"})
        store.put(Entry(key, {"code": os.urandom(20_000)}, inputs, compile_seconds=1.0))
    store.close()
    for i in range(4):  # what Inductor and Triton leave: generated code, modules, cubins
        f = root / "inductor" / f"d{i}" / f"k{i}.so"
        f.parent.mkdir(parents=True)
        f.write_bytes(os.urandom(50_000))
    (root / "warm-runs" / "x" / "files").mkdir(parents=True)
    (root / "warm-runs" / "x" / "files" / "ckpt").write_bytes(b"z" * 3000)
    return root


def _age(root: Path, seconds: float) -> None:
    old = time.time() - seconds
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(dirpath, name), (old, old))


def test_stats_accounts_for_every_byte_and_gc_frees_or_names_it(tmp_path: Path) -> None:
    root = _cache(tmp_path)
    data = json.loads(run_cli("stats", "--json", "--cache-dir", str(root)).stdout)
    assert data["disk_bytes"] == usage.du(root) and sum(data["disk"].values()) == usage.du(root)
    assert data["disk"]["Inductor/Triton working files"] == 200_000 and data["disk"]["store entries"] > 60_000

    young = run_cli("gc", "--max-bytes", "1K", "--cache-dir", str(root))
    assert young.returncode == 0, young.stderr
    assert "kept" in young.stdout and "used in the last 10 minutes stay" in young.stdout  # nothing silent
    after = json.loads(run_cli("stats", "--json", "--cache-dir", str(root)).stdout)
    assert after["entries"] == 0 and after["disk"]["store entries"] == 0
    assert after["disk"]["store blobs no entry names (freed by gc after the grace period)"] >= 60_000

    _age(root, 3600)  # past the grace period: everything the budget does not allow goes
    old = run_cli("gc", "--max-bytes", "1K", "--cache-dir", str(root))
    assert old.returncode == 0, old.stderr
    final = json.loads(run_cli("stats", "--json", "--cache-dir", str(root)).stdout)
    assert final["disk"]["Inductor/Triton working files"] == 0
    assert final["disk"]["store blobs no entry names (freed by gc after the grace period)"] == 0
    assert final["disk_bytes"] < 20_000, final["disk"]  # the warm run's files and small bookkeeping

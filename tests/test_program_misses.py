"""program_misses: a miss names the parts that differ from the newest stored program of the function."""
from __future__ import annotations

import json
from pathlib import Path

from pcompile.inductor import program_misses as pm


def _store(root: Path, name: str, meta: dict, fingerprint: dict) -> None:
    folder = root / "manifests" / "program" / name[:2]
    folder.mkdir(parents=True, exist_ok=True)
    body = {"key": f"program-{name}", "meta": meta, "inputs": {"layer": "program", "fingerprint": fingerprint}}
    (folder / f"program-{name}.json").write_text(json.dumps(body))


def test_the_parts_that_differ_are_named_and_another_function_is_ignored(tmp_path: Path) -> None:
    mine_configs, their_configs = {"dynamo": {"a": 1}, "inductor": {"b": 2}}, {"dynamo": {"a": 1}, "inductor": {"b": 3}}
    mine = {**pm.parts("m.Net.forward", {"backend": "inductor"}, mine_configs, {"cuda_device": 0}), **pm.settings(mine_configs)}
    theirs = {**pm.parts("m.Net.forward", {"backend": "inductor"}, their_configs, {"cuda_device": 1}),
              **pm.settings(their_configs)}
    other = pm.parts("m.Other.forward", {"backend": "eager"}, {}, {})
    _store(tmp_path, "aa", {"source": "sid-other", "parts": other}, {"torch": "2.11"})
    assert pm.explain(tmp_path, "sid-1", mine, {"torch": "2.11"}) is None  # no program of this function
    _store(tmp_path, "bb", {"source": "sid-1", "parts": theirs}, {"torch": "2.14"})
    assert pm.explain(tmp_path, "sid-1", mine, {"torch": "2.11"}) == ["configs.inductor.b", "device", "fingerprint.torch"]


def test_a_differing_config_section_is_named_setting_by_setting_and_an_older_program_by_section(tmp_path: Path) -> None:
    dynamo = {f"s{i}": i for i in range(200)}
    other = {"dynamo": {**dynamo, "s7": "other", "s9": {"a", "b"}}, "inductor": {}}
    mine = {**pm.parts("m.f", {}, {"dynamo": dynamo}, {}), **pm.settings({"dynamo": dynamo})}
    theirs = {**pm.parts("m.f", {}, other, {}), **pm.settings(other)}
    assert pm.differences(mine, theirs) == ["configs.dynamo.s7", "configs.dynamo.s9", "configs.inductor"]
    older = {k: v for k, v in theirs.items() if not k.endswith(pm.KEYS_SUFFIX)}  # saved before settings were kept
    assert pm.differences(mine, older) == ["configs.dynamo", "configs.inductor"]
    assert len(json.dumps(mine)) < 40 * 200  # small enough for every program's meta


def test_the_same_function_under_another_source_id_says_source(tmp_path: Path) -> None:
    mine = pm.parts("m.Net.forward", {}, {}, {"cuda_device": 0})
    _store(tmp_path, "cc", {"source": "sid-old", "parts": mine}, {"torch": "2.11"})
    assert pm.explain(tmp_path, "sid-new", mine, {"torch": "2.11"}) == ["source"]


def test_a_program_saved_without_parts_or_an_unreadable_manifest_explains_nothing(tmp_path: Path) -> None:
    mine = pm.parts("m.Net.forward", {}, {}, {})
    _store(tmp_path, "dd", {"source": "sid-1"}, {})
    (tmp_path / "manifests" / "program" / "dd" / "program-ee.json").write_text("{not json")
    assert pm.explain(tmp_path, "sid-1", mine, {}) is None
    assert pm.explain(tmp_path / "absent", "sid-1", mine, {}) is None


def test_a_config_set_is_the_same_part_in_every_process() -> None:
    """Sets in Dynamo's config iterate in a per-process order (string hashing is salted per process);
    the key sorts them, and so must the parts, or every miss would name `configs.dynamo`."""
    import os
    import subprocess
    import sys

    code = ("from pcompile.inductor import program_misses as pm; "
            "print(pm._digest({'ignore': {'torch.testing', 'torch._refs', 'torch._prims', 'torch._decomp', 'x', 'y'}}))")
    seen = {subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONHASHSEED=str(seed)),
                           capture_output=True, text=True, check=True).stdout.strip() for seed in range(1, 6)}
    assert len(seen) == 1, seen


def test_a_job_started_in_another_folder_computes_the_same_program_key(tmp_path: Path) -> None:
    """Dynamo's debug_dir_root defaults to a folder under the working directory; a warm and its job
    started in different folders must still share programs (the H200 GPU tier missed on it)."""
    import os
    import subprocess
    import sys

    code = "from pcompile.inductor import programs; print(programs.options_digest({'backend': 'inductor'}, 'f')[0])"
    keys = set()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        keys.add(subprocess.run([sys.executable, "-c", code], cwd=tmp_path / name, capture_output=True, text=True,
                                check=True, env=dict(os.environ, PYTHONHASHSEED="0")).stdout.strip())
    assert len(keys) == 1, keys

"""What a device profile's software means (issue 32, item 6): `profile --show` says what must
match, a built-in profile's capture host is reference only, the ptxas probe spells versions as the
keys do, and a warm on a built-in profile of other versions says so in one line."""
from __future__ import annotations

import shutil
from pathlib import Path

from conftest import run_cli


def test_show_builtin_profile_does_not_claim_its_software_must_match() -> None:
    out = run_cli("profile", "--show", "h100")
    assert out.returncode == 0, out.stderr
    assert "must match on the warm host and the GPU host" not in out.stdout
    assert "reference only" in out.stdout and "warm host's torch" in out.stdout


def test_show_own_profile_marks_the_keyed_software(tmp_path: Path) -> None:
    from pcompile.vdev.profile import BUILTIN_DIR, resolve

    own = tmp_path / "my-gpu.json"
    shutil.copy(resolve("h100").source, own)
    assert Path(resolve("h100").source).parent.resolve() == BUILTIN_DIR
    out = run_cli("profile", "--show", str(own))
    assert out.returncode == 0, out.stderr
    assert "* torch:" in out.stdout and "* triton:" in out.stdout and "  triton_backend_hash:" in out.stdout
    assert "in every cache key" in out.stdout


def test_profile_json_flag_prints_the_profile() -> None:
    import json

    out = run_cli("profile", "--show", "h100", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["board"].startswith("h100")


def test_capture_spells_ptxas_as_the_keys_do() -> None:
    from pcompile.keys import versions
    from pcompile.vdev.capture import _ptxas_version

    for arch in (90, 100):
        assert _ptxas_version(arch) == versions.ptxas_version(arch)
        assert not _ptxas_version(arch).startswith("unknown")


def test_warm_on_a_builtin_profile_of_other_versions_says_what_differs() -> None:
    from pcompile.vdev.profile import resolve
    from pcompile.warm.runner import builtin_profile_note

    prof = resolve("h100")
    here = {"torch": "9.9.9", "triton": "8.8.8", "cudnn": prof.software.get("cudnn"), "python": "3.99"}
    line = builtin_profile_note(prof, here)
    assert "torch 9.9.9" in line and "triton 8.8.8" in line and "python 3.99" in line and "cudnn" not in line
    assert "board properties" in line and "\n" not in line
    same = {k: prof.software.get(k) for k in ("torch", "triton", "cudnn")}
    same["python"] = ".".join(str(prof.software["python"]).split(".")[:2])
    assert builtin_profile_note(prof, same) == ""

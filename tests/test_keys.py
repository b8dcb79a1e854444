"""Keys: deterministic, location-free, strictly validated; version probes fail loudly on drift."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_py
from pcompile.errors import BadKeyError
from pcompile.keys import Key, fingerprint, make_key
from pcompile.keys import versions
from pcompile.keys.explain import diff_inputs

KEY_SNIPPET = """
import json, os
from pcompile.keys import fingerprint, make_key
src = open("kernel.py").read()
key, inputs = make_key("kernel", src, fingerprint(ptxas=True))
print(json.dumps({"key": str(key), "fp": inputs.fingerprint}))
"""


def test_same_key_from_two_checkouts_and_two_ranks(tmp_path: Path) -> None:
    outs = []
    for i, rank in enumerate(("0", "3")):
        where = tmp_path / f"checkout{i}" / "deep" / "path"
        where.mkdir(parents=True)
        (where / "kernel.py").write_text("def kernel(x):\n    return x + 1\n")
        proc = run_py(KEY_SNIPPET, env={"RANK": rank, "LOCAL_RANK": rank, "CUDA_VISIBLE_DEVICES": rank}, cwd=where)
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outs[0]["key"] == outs[1]["key"]
    blob = json.dumps(outs[0]["fp"])
    for leak in (str(tmp_path), "checkout0", "RANK"):
        assert leak not in blob


def test_key_changes_with_source_and_fingerprint() -> None:
    fp = {"torch": "1", "target_arch": "sm_90"}
    a, ia = make_key("kernel", "x", fp)
    b, ib = make_key("kernel", "y", fp)
    c, ic = make_key("kernel", "x", {**fp, "target_arch": "sm_80"})
    assert len({a, b, c}) == 3
    assert [d.field for d in diff_inputs(ia, ic)] == ["fingerprint.target_arch"]
    assert [d.field for d in diff_inputs(ia, ib)] == ["source_hash"]
    assert make_key("kernel", "x", fp)[0] == a


@pytest.mark.parametrize(
    "bad",
    ["", "kernel", "kernel-", "kernel-" + "0" * 31, "kernel-" + "g" * 32, "KERNEL-" + "0" * 32, "blob-" + "0" * 32,
     "../kernel-" + "0" * 32, "/etc/passwd", "kernel-" + "0" * 32 + "/..", "kernel-" + "0" * 31 + "\x00",
     "kernel-" + "0" * 32 + "\n", "graph/../../x", None, 42],
)
def test_malformed_keys_rejected(bad: object) -> None:
    with pytest.raises(BadKeyError):
        Key.parse(bad)  # type: ignore[arg-type]


def test_unknown_layer_rejected() -> None:
    with pytest.raises(BadKeyError):
        make_key("../x", "src", {})


def test_version_probes_know_this_install() -> None:
    """If torch/triton move the APIs these probes read, this fails instead of keys going vague."""
    fp = fingerprint(ptxas=True)
    for field in ("torch", "triton", "cuda", "python", "ptxas"):
        assert "unknown" not in fp[field], (field, fp[field])
    assert "+git." in versions.torch_build()
    assert "+" in versions.triton_build()

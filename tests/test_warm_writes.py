"""A warm never harms the user's files (pcompile/warm/writes.py), checked in a fresh process
(the redirect patches the process's open/os functions, so never in pytest's own)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path


PROBE = textwrap.dedent("""\
    import json, os, shutil, subprocess, sys, tempfile
    from pathlib import Path
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from pcompile.warm import writes

    user, run, cache = map(Path, sys.argv[1:4])
    os.chdir(user)
    mode = FakeTensorMode()
    w = writes.Writes(run, [str(cache)], [str(user)], lambda t: getattr(t, "fake_mode", None) is mode)
    from pcompile.warm import protect
    protect.install(w)
    out = {}
    os.makedirs("out", exist_ok=True)                       # relative: in the user's tree
    with open("out/log.txt", "a") as fh:
        fh.write("from the warm\\n")
    out["log_reads_back"] = open("out/log.txt").read()       # a script reads what it wrote
    Path("out/notes.txt").write_text("x")                   # pathlib too
    os.replace("out/notes.txt", "out/notes2.txt")
    torch.save({"w": torch.ones(2)}, "out/real.pt")          # real tensors: saved, redirected
    with mode:
        fake = torch.empty(3, device="cuda")
    torch.save({"w": fake, "step": 3}, "out/ckpt.pt")        # virtual tensors: a placeholder checkpoint
    torch.save({"w": fake}, "out/tmp.pth.tar")              # timm's CheckpointSaver: save to tmp,
    os.replace("out/tmp.pth.tar", "out/last.pth.tar")        # then rename it to last,
    os.link("out/last.pth.tar", "out/best.pth.tar")          # then hard-link best to it
    os.remove("precious.txt")                                # the user's file: never deleted
    shutil.rmtree("olddir")
    (cache / "entry").write_text("cache")                    # pcompile's cache dir: left alone
    d = tempfile.mkdtemp(dir=str(user))                      # private scratch, even in the user's tree
    subprocess.run(["sh", "-c", f"echo native > {d}/native.txt"], check=True)  # native code writes there
    out["tempdir_native"] = open(os.path.join(d, "native.txt")).read()
    out["summary"] = w.summary()
    print(json.dumps(out))
""")


def test_user_tree_untouched_and_the_script_still_sees_its_writes(tmp_path):
    user, run, cache = tmp_path / "job", tmp_path / "run", tmp_path / "cache"
    for d in (user, run, cache):
        d.mkdir()
    (user / "out").mkdir()
    (user / "out" / "log.txt").write_text("the user's log\n")
    (user / "precious.txt").write_text("keep me")
    (user / "olddir").mkdir()
    (user / "olddir" / "a").write_text("a")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    proc = subprocess.run([sys.executable, str(probe), str(user), str(run), str(cache)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    s = out["summary"]
    # the user's files are exactly as they were
    assert (user / "out" / "log.txt").read_text() == "the user's log\n"
    assert (user / "precious.txt").read_text() == "keep me" and (user / "olddir" / "a").exists()
    assert not (user / "out" / "ckpt.pt").exists() and not (user / "out" / "real.pt").exists()
    assert not (user / "out" / "notes2.txt").exists()
    # the script's writes went to the run dir, and it read them back from there
    mirror = Path(s["dir"] + str(user))
    # appending continues the file the script sees (copied up first), as on a real run
    assert out["log_reads_back"] == "the user's log\nfrom the warm\n" == (mirror / "out" / "log.txt").read_text()
    assert (mirror / "out" / "notes2.txt").read_text() == "x" and (mirror / "out" / "real.pt").exists()
    assert s["n_placeholder_saves"] == 2 and "ckpt.pt" in s["placeholder_saves"][0] and not s["n_skipped_saves"]
    # a save of virtual tensors writes a placeholder checkpoint in the run dir only (loads back:
    # tests/test_warm_checkpoints.py), which the script's rename and link move
    placeholder = (mirror / "out" / "last.pth.tar").read_bytes()
    assert (mirror / "out" / "best.pth.tar").read_bytes() == placeholder and b"pcompile_placeholders" in placeholder
    assert not (mirror / "out" / "tmp.pth.tar").exists()
    assert not any((user / "out" / n).exists() for n in ("tmp.pth.tar", "last.pth.tar", "best.pth.tar"))
    assert len(s["skipped_deletes"]) == 2
    # pcompile's cache and tempfile scratch dirs are real
    assert (cache / "entry").read_text() == "cache" and out["tempdir_native"] == "native\n"

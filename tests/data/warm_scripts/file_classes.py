"""A plain training script that touches files the ways issue 25's file-system classes 1-5 do, then
trains a tiny compiled model. Prints what it saw as one `SEEN {json}` line. Run from the user's
job directory, which holds data/a.txt, data/old.txt, data/data.lock and logs/."""
import errno
import fcntl
import glob
import json
import multiprocessing as mp
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import torch


def spawn_worker(path: str) -> None:
    with open(path, "w") as fh:
        fh.write("from a spawned worker\n")


def lock(path: str, timeout: float = 10.0) -> bool:
    """filelock's UnixFileLock, in plain Python: O_CREAT only when the lock file is missing."""
    flags = os.O_RDWR | os.O_TRUNC
    if not os.path.exists(path):
        flags |= os.O_CREAT
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fd = os.open(path, flags, 0o644)
        except OSError:
            time.sleep(0.05)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            time.sleep(0.05)
            continue
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return True
    return False


def files() -> dict:
    seen = {}
    # 1: existence, listings and a second mkdir(exist_ok) see the script's own writes
    out = Path("runs/exp1")
    out.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    os.makedirs("runs/exp1", exist_ok=True)
    (out / "config.json").write_text("{}")
    with open("data/new.txt", "w") as fh:
        fh.write("new")
    seen["exists"] = [os.path.exists("runs/exp1/config.json"), os.path.isdir("runs/exp1"), Path("runs").is_dir()]
    seen["listdir"] = sorted(os.listdir("data"))
    seen["scandir"] = sorted(e.name for e in os.scandir("runs/exp1"))
    seen["glob"] = sorted(glob.glob("data/*.txt"))
    seen["iterdir"] = sorted(p.name for p in Path("runs").iterdir())
    seen["walk"] = sorted(os.path.join(r, f) for r, _, fs in os.walk("runs") for f in fs)
    # renames and deletes of the user's own files
    os.rename("data/a.txt", "data/b.txt")
    os.remove("data/old.txt")
    seen["after_rename_delete"] = sorted(os.listdir("data"))
    seen["b_content"] = Path("data/b.txt").read_text()
    with open("logs/train.log", "a") as fh:
        fh.write("step 0\n")
    seen["log"] = Path("logs/train.log").read_text()
    # 2: atomic save: temp file, rename, chmod
    tmp = out / "ckpt.tmp"
    tmp.write_bytes(b"weights")
    os.replace(tmp, out / "ckpt.bin")
    os.chmod(out / "ckpt.bin", 0o600)
    seen["chmod"] = oct(stat.S_IMODE(os.stat(out / "ckpt.bin").st_mode))
    # 3: free space of the directory it just made
    st = os.statvfs(out)
    seen["free"] = [st.f_bavail * st.f_frsize > 0, shutil.disk_usage(str(out)).total > 0]
    # 4: a lock file that is already on disk
    seen["lock"] = lock("data/data.lock")
    # 5: children: a spawned worker, a Python subprocess and a shell write files the script reads back
    p = mp.get_context("spawn").Process(target=spawn_worker, args=(str(out / "spawn.txt"),))
    p.start()
    p.join(120)
    subprocess.run([sys.executable, "-c", f"open({str(out / 'sub.txt')!r}, 'w').write('from a subprocess')"], check=True)
    sh = subprocess.run(["sh", "-c", f"echo from a shell > {out / 'shell.txt'}"])
    seen["spawn"] = (out / "spawn.txt").read_text() if (out / "spawn.txt").exists() else None
    seen["subprocess"] = (out / "sub.txt").read_text() if (out / "sub.txt").exists() else None
    seen["shell"] = (out / "shell.txt").read_text() if sh.returncode == 0 and (out / "shell.txt").exists() else None
    return seen


def main() -> None:
    print("SEEN " + json.dumps(files()), flush=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
    step = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = step(torch.randn(8, 16, device="cuda")).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()

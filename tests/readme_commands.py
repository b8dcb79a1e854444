"""The README's shell commands, read from its text, so the tests that run them cannot drift from it."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def section(title: str, text: str | None = None) -> str:
    """The README text under the heading `title` (any level), up to the next heading of that level or above."""
    text = README.read_text() if text is None else text
    m = re.search(rf"^(#+) {re.escape(title)}\s*$", text, re.M)
    assert m, f"README has no heading {title!r}"
    level = len(m.group(1))
    rest = text[m.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def bash_blocks(title: str) -> list[list[str]]:
    """Each ```bash block under `title`, as its commands: comments dropped, `\\` lines joined,
    `a && b` split into a and b."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", section(title), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        cmds: list[str] = []
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                cmds.extend(part.strip() for part in line.split(" && "))
        out.append(cmds)
    return out


def argv(command: str) -> list[str]:
    """The command as this interpreter runs it: `pcompile` and `python` are this checkout's."""
    args = shlex.split(command)
    if args[0] == "pcompile":
        return [sys.executable, "-m", "pcompile.cli.main", *args[1:]]
    if args[0] == "python":
        return [sys.executable, *args[1:]]
    return args


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment minus pcompile/Inductor/Triton settings, this checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "TORCHINDUCTOR_", "TRITON_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run(command: str, env: dict[str, str], timeout: float = 900, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run one README command; fail the test with its output if it fails."""
    proc = subprocess.run(argv(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"`{command}` exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc

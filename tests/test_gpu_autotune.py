"""max-autotune on a real GPU after pcompile's store already holds the candidates (issue 34).

Run on the device machine: `pytest -m gpu tests/test_gpu_autotune.py`. Skips without CUDA.

Job A tunes three matmuls with pcompile (its pool compiles the candidates and files them in the
store). Job B, with fresh Inductor and Triton dirs and Inductor's graph and autotune caches off (so
it lowers and tunes again), gets every candidate from the store. Before the fix, B's precompile
step took ~0 s and its benchmark compiled each candidate inside the timing loop (H200, torch 2.11:
12.6-17.5 s for 22 choices, ~0.7 s a choice; stock: 0.18-0.25 s). Now the candidates are on disk
before timing, so each later autotune benchmarks at stock's ~0.01 s a choice.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parent.parent
LINE = re.compile(r"AUTOTUNE benchmarking takes ([0-9.]+) seconds and ([0-9.]+) seconds precompiling for (\d+) choices")

SCRIPT = textwrap.dedent("""\
    import json, sys
    import torch
    import pcompile
    if sys.argv[1] == "retune":  # lower and benchmark again; kernels still go through pcompile's store
        # Only caches a kernel's source does not name: autotune_local_cache/autotune_remote_cache
        # are in every kernel's inductor_meta, so turning them off here made every key differ.
        # The fresh TORCHINDUCTOR_CACHE_DIR already holds no autotune timings.
        import torch._inductor.config as ic, torch._functorch.config as fc
        ic.fx_graph_cache = ic.fx_graph_remote_cache = False
        fc.enable_autograd_cache = fc.enable_remote_autograd_cache = False
    if sys.argv[1] != "stock":
        assert pcompile.install()
    import torch._inductor.config as ic
    ic.max_autotune_gemm_backends = "TRITON,ATEN"
    for n in (2048, 3072, 4096):  # >= ~30 us a matmul on an H100: choices 5% apart are told apart
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        f = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs", dynamic=False)
        torch.testing.assert_close(f(a, b), a @ b, rtol=2e-2, atol=2e-1)
        torch._dynamo.reset()
    from pcompile.inductor import pool_install
    print(json.dumps({"counts": pool_install.counts() if sys.argv[1] != "stock" else {}}))
    """)


HEADER = re.compile(r"^AUTOTUNE (\w+\(.*\))$")
CHOICE = re.compile(r"^  (\S+) ([0-9.]+) ms [0-9.]+% ?(.*)$")


def _tables(stderr: str) -> dict[str, list[tuple[str, float]]]:
    """Each autotune Inductor printed: its header -> [(choice description, ms)], best first."""
    tables: dict[str, list[tuple[str, float]]] = {}
    current: list[tuple[str, float]] | None = None
    for line in stderr.splitlines():
        if (m := HEADER.match(line)):
            current = tables.setdefault(m.group(1), [])
        elif current is not None and (m := CHOICE.match(line)):
            current.append((m.group(3) or m.group(1), float(m.group(2))))
    return tables


def _job(tmp_path: Path, name: str, mode: str) -> tuple[dict, list[tuple[float, float, int]]]:
    script = tmp_path / "mm.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env.update({"PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
                "PCOMPILE_CACHE_DIR": str(tmp_path / "cache"),
                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"inductor-{name}"),
                "TRITON_CACHE_DIR": str(tmp_path / f"triton-{name}")})
    for var in ("PCOMPILE_SHARED_DIR", "PCOMPILE_REMOTE", "TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_FORCE_DISABLE_CACHES"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["tables"] = _tables(proc.stderr)
    tunes = [(float(m.group(1)), float(m.group(2)), int(m.group(3))) for m in LINE.finditer(proc.stderr)]
    assert tunes, proc.stderr[-4000:]
    return out, tunes


def test_candidates_from_the_store_are_precompiled_before_timing(tmp_path: Path) -> None:
    first, tunes_a = _job(tmp_path, "a", "tune")
    assert first["counts"].get("compiled", 0) >= 1, first
    second, tunes_b = _job(tmp_path, "b", "retune")
    assert second["counts"].get("hit", 0) >= 1 and second["counts"].get("candidate", 0) >= 1, second
    # the first autotune of a process also pays the benchmarker's start; the later ones are the measure
    for bench_s, _pre_s, choices in tunes_b[1:]:
        assert bench_s / choices < 0.1, (tunes_a, tunes_b)


def test_the_winner_from_the_store_path_is_one_stock_measures_as_best(tmp_path: Path) -> None:
    """Same timings, same winners. A job whose candidates came from the store lists stock's best
    choices, ranks them as stock does (each time over its table's best: the median ratio of the two
    within 10%; a candidate built differently would be slower), and so picks one that stock's own
    table puts near its best.

    The pick's bound is 10%, not 5%: at 2048 an H200 matmul takes ~36 us and two processes' tables
    can differ by more than 5% for it (a 5% bound on the pick alone failed in 3 of 5 GPU runs up to
    session 8). The per-choice median is the check for a systematic difference."""
    stock, _ = _job(tmp_path, "stock", "stock")
    _job(tmp_path, "a", "tune")
    ours, _ = _job(tmp_path, "b", "retune")
    assert stock["tables"] and set(ours["tables"]) == set(stock["tables"]), (stock["tables"], ours["tables"])
    for header, choices in ours["tables"].items():
        measured = dict(stock["tables"][header])
        # Inductor prints only its best few choices: compare those both tables list, each relative
        # to its own table's best: in session 10 the job from the store timed the choices of
        # mm(2048) a median 25% faster than the stock job had (GPU clocks differ between processes)
        best, our_best = stock["tables"][header][0][1], choices[0][1]
        ratios = sorted((ms / our_best) / (measured[name] / best) for name, ms in choices if name in measured)
        assert len(ratios) >= min(len(choices), len(measured)) // 2, (header, choices, stock["tables"][header])
        median = ratios[len(ratios) // 2]
        assert 0.9 <= median <= 1.1, (header, median, choices, stock["tables"][header])
        pick = choices[0][0]
        assert pick in measured, (header, pick, stock["tables"][header])
        print(f"{header}: pick {pick} {measured[pick]:.4f} ms by stock, stock's best {best:.4f} ms, median ratio {median:.3f}")
        assert measured[pick] <= 1.10 * best, (header, pick, stock["tables"][header])

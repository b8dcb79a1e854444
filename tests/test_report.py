"""`pcompile report` on the events of a real CPU compile by `backend="pcompile"` (tests/report_workload.py:
the backend's own graph, lookup and C++ kernel events, beside two processes compiling Triton kernels
as pool workers would): HTML that parses, a real PNG, a loadable Chrome trace."""
from __future__ import annotations

import html.parser
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, child_env, run_cli

WORKLOAD = REPO / "tests" / "report_workload.py"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A cold and then a hot run of the instrumented workload, sharing one cache dir."""
    root = tmp_path_factory.mktemp("report")
    env = {"PCOMPILE_CACHE_DIR": str(root / "cache"), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
           "TRITON_CACHE_DIR": str(root / "triton")}
    for job in ("cold", "hot"):
        res = subprocess.run([sys.executable, str(WORKLOAD), "--costs", str(root / "costs.json")],
                             env=child_env(dict(env, PCOMPILE_JOB_ID=f"{job}-run")), capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
    env["OUT"] = str(root)
    return env


class _Collect(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attrs.extend(attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _report(jobs: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    res = run_cli("report", *args, env={k: v for k, v in jobs.items() if k != "OUT"})
    assert res.returncode == 0, res.stderr
    return res


def test_html_report_is_self_contained_and_parses(jobs: dict[str, str]) -> None:
    out = Path(jobs["OUT"]) / "cold.html"
    res = _report(jobs, "--job", "cold-run", "--out", str(out))
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 5 and lines[0].startswith("job cold-run") and str(out) in lines[-1]
    assert "graphs: 1 (1 compiled)" in lines[1]
    assert "FX graph 0/2 hit, AOTAutograd 0/1 hit, kernel 0/3 hit" in lines[2], lines  # the backend's lookups, C++ kernels
    p = _Collect()
    p.feed(out.read_text())
    p.close()
    assert p.tags.get("svg") == 1 and p.tags.get("rect", 0) >= 15 and p.tags.get("table", 0) >= 4
    text = " ".join(p.text)
    for needle in ("critical path", "graph_compile", "kernel_compile", "Slowest kernels", "triton"):
        assert needle in text
    # nothing is fetched: no external scripts, styles, images or links (the SVG namespace is not a fetch)
    fetched = [v for k, v in p.attrs if k in ("src", "href") and v]
    assert fetched == []


def test_png_report_is_a_real_image(jobs: dict[str, str]) -> None:
    out = Path(jobs["OUT"]) / "cold.png"
    _report(jobs, "--job", "cold-run", "--format", "png", "--out", str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 200
    import matplotlib.image

    assert matplotlib.image.imread(str(out)).shape[:2] == (height, width)


def test_chrome_trace_loads_with_expected_events(jobs: dict[str, str]) -> None:
    out = Path(jobs["OUT"]) / "cold.trace.json"
    _report(jobs, "--job", "cold-run", "--format", "chrome", "--out", str(out))
    trace = json.loads(out.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["name"].split(" ", 1)[0] for e in complete}  # graphs and kernels carry their names after the kind
    assert {"graph_compile", "kernel_compile", "cache_lookup", "warm_step"} <= names
    assert all(isinstance(e["ts"], float) and e["dur"] >= 0 for e in complete)
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"main", "worker 0", "worker 1"} <= threads
    assert any(e["cat"] == "pcompile,critical" for e in complete)


def test_hot_run_shows_hits_and_time_saved(jobs: dict[str, str]) -> None:
    res = _report(jobs, "--out", str(Path(jobs["OUT"]) / "hot.html"), "--json")  # newest job by default
    s = json.loads(res.stdout)
    assert s["job"] == "hot-run"
    assert s["graph_outcomes"] == {"hit": 1} and s["kernel_outcomes"] == {"hit": 6}
    # the backend's own lookups: its FX graphs (forward, backward) and the AOTAutograd entry
    assert (s["layers"]["graph"]["hits"], s["layers"]["autograd"]["hits"]) == (2, 1), s["layers"]
    assert s["hit_rate"] == 1.0
    assert s["saved"]["hits_with_cost"] >= 7 and s["saved"]["net_s"] > 0


def test_list_and_unknown_job(jobs: dict[str, str]) -> None:
    res = _report(jobs, "--list")
    assert res.stdout.index("hot-run") < res.stdout.index("cold-run")
    bad = run_cli("report", "--job", "nope", env={k: v for k, v in jobs.items() if k != "OUT"})
    assert bad.returncode == 2 and "no event log for job 'nope'" in bad.stderr and "hot-run" in bad.stderr


def test_critical_path_follows_waits_on_workers() -> None:
    """Main lowers 0-4 s, then waits in graph_compile while a worker compiles 4-9 s, then finishes at 10 s."""
    from pcompile.events.analysis import analyze

    evs = [
        {"kind": "graph_compile", "ts": 1e9, "dur": 10.0, "pid": 1, "host": "h", "id": "1.1"},
        {"kind": "inductor_lowering", "ts": 1e9, "dur": 4.0, "pid": 1, "host": "h", "id": "1.2", "parent": "1.1"},
        {"kind": "kernel_compile", "ts": 1e9 + 4, "dur": 5.0, "pid": 2, "host": "h", "worker": 0, "outcome": "compiled"},
        {"kind": "kernel_compile", "ts": 1e9 - 3, "dur": 1.0, "pid": 2, "host": "h", "worker": 1, "outcome": "hit"},
    ]
    a = analyze(evs, job="synthetic")
    kinds = [(s["kind"], round(s["end"] - s["start"], 3)) for s in a.critical]
    assert kinds == [("inductor_lowering", 4.0), ("kernel_compile", 5.0), ("graph_compile (self)", 1.0)]
    assert a.summary()["critical_path_s"] == 10.0
    assert [lane.label for lane in a.lanes] == ["worker 0", "worker 1", "main"]  # by process start, workers in order

"""The restart floor table (issue 21): where a hot process's time goes, stock beside pcompile.

Reads the `results.json` that `run_all.py` writes (hot or warm scenarios; with `--repeats N` the
repeated cases count too) and prints, per model, the median seconds of each part of a restart from
process start to the end of the first step, for every case label family given:

    python benchmarks/floor_table.py OUT/results.json [--labels stock-hot,pcompile-hot,pcompile-after-warm]

Parts: the `floor` field of `_case.py` (interpreter start, `import torch`, CUDA init, model build,
Triton module loads and launcher builds), the `torch.compile` call, the first step, Dynamo's and
Inductor's own phase timers inside it (nested timers overlap: they are not a sum), and the process
wall time from start to the end of the first step.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

FLOOR = (("interpreter start", "interpreter_s"), ("import torch", "import_torch_s"), ("CUDA init", "cuda_init_s"),
         ("model build", "model_build_s"))
TAIL = (("Triton module loads + launchers (in the step)", "cubin_loads_s"),)


def _family(label: str) -> str:
    return re.sub(r"-r\d+$", "", label)


def _median(values: list[float]) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float))]
    return round(statistics.median(vals), 3) if vals else None


def table(rows: list[dict[str, Any]], labels: list[str], top_phases: int) -> str:
    out: list[str] = []
    for model in sorted({r.get("model") for r in rows if r.get("model")}):
        cases: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            if r.get("model") != model:
                continue
            for label, case in (r.get("cases") or {}).items():
                if isinstance(case, dict) and _family(label) in labels and not case.get("error"):
                    cases.setdefault(_family(label), []).append(case)
        present = [lab for lab in labels if lab in cases]
        if not present:
            continue

        def med(lab: str, get: Any) -> str:
            v = _median([get(c) for c in cases[lab]])
            return "" if v is None else f"{v:.2f}"

        out.append(f"\n#### {model} (medians of {', '.join(f'{lab} x{len(cases[lab])}' for lab in present)})\n")
        out.append("| part | " + " | ".join(present) + " |")
        out.append("|---|" + "---:|" * len(present))
        for name, key in FLOOR:
            out.append(f"| {name} | " + " | ".join(med(lab, lambda c, k=key: (c.get("floor") or {}).get(k)) for lab in present) + " |")
        out.append("| `torch.compile(...)` call | " + " | ".join(med(lab, lambda c: c.get("compile_call_s")) for lab in present) + " |")
        out.append("| **first step** (call included) | " + " | ".join(med(lab, lambda c: c.get("first_step_s")) for lab in present) + " |")
        for name, key in TAIL:
            out.append(f"| - {name} | " + " | ".join(med(lab, lambda c, k=key: (c.get("floor") or {}).get(k)) for lab in present) + " |")
        out.append("| - Dynamo frames converted | " + " | ".join(med(lab, lambda c: c.get("frames_traced")) for lab in present) + " |")
        phase_names: dict[str, float] = {}
        for lab in present:
            for c in cases[lab]:
                for k, v in (c.get("phases_s") or {}).items():
                    if isinstance(v, (int, float)):
                        phase_names[k] = max(phase_names.get(k, 0.0), v)
        for k, _ in sorted(phase_names.items(), key=lambda kv: -kv[1])[:top_phases]:
            out.append(f"| - phase `{k}` | " + " | ".join(med(lab, lambda c, k=k: (c.get("phases_s") or {}).get(k)) for lab in present) + " |")
        out.append("| **process start to first step end** | " + " | ".join(
            med(lab, lambda c: (c.get("floor") or {}).get("process_to_first_step_end_s")) for lab in present) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--labels", default="stock-hot,pcompile-hot,pcompile-after-warm")
    ap.add_argument("--top-phases", type=int, default=12)
    a = ap.parse_args()
    data = json.loads(a.results.read_text())
    rows = data.get("rows", data) if isinstance(data, dict) else data
    print(table(rows if isinstance(rows, list) else [], [x for x in a.labels.split(",") if x], a.top_phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# GPU check of the warm classes found on PyTorch's torch.compile tutorials (branch tut): compiled
# autograd (tests/data/warm_scripts/compiled_autograd.py), an eager user-defined Triton kernel
# (vdev_classes.py) and a script that compiles inside fresh_inductor_cache() (fresh_cache_dirs.py).
# Each is warmed on the GPU host with the GPU hidden, then run on the GPU through pcompile with the
# warm's cache dir, beside stock hot; prints FX/AOTAutograd counters of both (target: pcompile's
# FX/AOTAutograd misses == 0; stock hot misses too on fresh_cache_dirs, whose temp cache is new each
# run) and the script's markers from the real run.
#     bash benchmarks/tutorial_classes_gpu.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d /tmp/tutorial-classes-XXXX)}
unset PCOMPILE_CACHE_DIR TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR || true
for name in compiled_autograd vdev_classes fresh_cache_dirs; do
  D="$OUT/$name"; mkdir -p "$D/job" && cp "tests/data/warm_scripts/$name.py" "$D/job/train.py"
  CUDA_VISIBLE_DEVICES="" python -m pcompile.cli.main warm "$D/job/train.py" --target h100 --steps all \
    --cache-dir "$D/pcompile-cache" --json > "$D/warm.json"
  STOCK=(PCOMPILE_DISABLE=1 TORCHINDUCTOR_CACHE_DIR="$D/stock" TRITON_CACHE_DIR="$D/stock/triton")
  env "${STOCK[@]}" python benchmarks/corpus_probe.py --out "$D/stock_cold.json" --steps 3 -- "$D/job/train.py" > "$D/stock_cold.log" 2>&1
  env PCOMPILE=1 PCOMPILE_CACHE_DIR="$D/pcompile-cache" python benchmarks/corpus_probe.py --out "$D/pcompile.json" --steps 3 -- "$D/job/train.py" > "$D/pcompile.log" 2>&1
  env "${STOCK[@]}" python benchmarks/corpus_probe.py --out "$D/stock_hot.json" --steps 3 -- "$D/job/train.py" > "$D/stock_hot.log" 2>&1
  grep -h "ok:" "$D/pcompile.log" || true
  python - "$D" "$name" <<'PY'
import json, sys, pathlib
out, name = pathlib.Path(sys.argv[1]), sys.argv[2]
for run in ("stock_cold", "pcompile", "stock_hot"):
    r = json.loads((out / f"{run}.json").read_text())
    print(name, run, json.dumps({k: r.get(k) for k in ("status", "first_step_s", "fx", "aot")}))
PY
done

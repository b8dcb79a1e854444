#!/usr/bin/env bash
# GPU check of issue 25's virtual-device classes 6-10 (tests/data/warm_scripts/vdev_classes.py):
# warm it on the GPU host with the GPU hidden, then run it on the GPU through pcompile with the
# warm's cache dir, beside stock hot, and print FX/AOTAutograd hits of both (target: pcompile's
# hits == stock hot's hits) and the script's class markers from the real run.
#     bash benchmarks/vdev_classes_gpu.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d /tmp/vdev-classes-XXXX)}
SCRIPT=tests/data/warm_scripts/vdev_classes.py
mkdir -p "$OUT/job" && cp "$SCRIPT" "$OUT/job/train.py"
unset PCOMPILE_CACHE_DIR TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR || true
CUDA_VISIBLE_DEVICES="" python -m pcompile.cli.main warm "$OUT/job/train.py" --target h100 \
  --cache-dir "$OUT/pcompile-cache" --json > "$OUT/warm.json"
STOCK=(PCOMPILE_DISABLE=1 TORCHINDUCTOR_CACHE_DIR="$OUT/stock" TRITON_CACHE_DIR="$OUT/stock/triton")
env "${STOCK[@]}" python benchmarks/corpus_probe.py --out "$OUT/stock_cold.json" --steps 3 -- "$OUT/job/train.py" > "$OUT/stock_cold.log" 2>&1
env PCOMPILE=1 PCOMPILE_CACHE_DIR="$OUT/pcompile-cache" python benchmarks/corpus_probe.py --out "$OUT/pcompile.json" --steps 3 -- "$OUT/job/train.py" > "$OUT/pcompile.log" 2>&1
env "${STOCK[@]}" python benchmarks/corpus_probe.py --out "$OUT/stock_hot.json" --steps 3 -- "$OUT/job/train.py" > "$OUT/stock_hot.log" 2>&1
grep -h "^class" "$OUT/pcompile.log" || echo "no class markers in the GPU run: see $OUT/pcompile.log"
python - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("stock_cold", "pcompile", "stock_hot"):
    r = json.loads((out / f"{name}.json").read_text())
    print(name, json.dumps({k: r.get(k) for k in ("status", "first_step_s", "fx", "aot")}))
PY

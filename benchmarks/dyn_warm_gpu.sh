#!/usr/bin/env bash
# Dynamic-shape GPT-2 after a warm vs stock hot (issue 25 part 5), on the GPU machine.
#  1. the benchmark row: FX / AOTAutograd hits of the GPU job after `pcompile warm`, beside stock hot's
#     (expected: after warm FX 4/4, AOT 2/3 = stock hot's; on this repo's CPU host the stand-in, a second
#     warm of tiny-gpt2-dyn on the first warm's cache, shows exactly that);
#  2. if the GPU job still misses: which FX key field differs between the warm and the GPU job.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 benchmarks/warm.py --models gpt2-dyn --steps 10 --timeout 300
out=${1:-/tmp/diag-gpt2-dyn}
TORCH_LOGS=recompiles python3 benchmarks/diag_warm_keys.py "$out" -- benchmarks/_case.py --model gpt2-dyn \
    --backend pcompile --steps 10 --kernel-steps 0

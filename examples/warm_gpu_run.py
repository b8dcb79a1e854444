"""Run a training script on the real GPU the way the job would after `pcompile warm`, and say
how much of it came from the caches.

    python examples/warm_gpu_run.py --cache-dir DIR [--pcompile] SCRIPT [script args]

Points Inductor/Triton at <DIR>/inductor (where `pcompile warm --cache-dir DIR` wrote), runs the
script unchanged, then prints FX graph and AOTAutograd cache hits/misses and the wall time.
With --pcompile it calls pcompile.install() first (when the inductor integration exists).
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cache-dir", required=True)
    p.add_argument("--pcompile", action="store_true")
    p.add_argument("--json-out", default=None)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    inductor = os.path.join(os.path.abspath(a.cache_dir), "inductor")
    os.environ["PCOMPILE_CACHE_DIR"] = os.path.abspath(a.cache_dir)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor
    os.environ["TRITON_CACHE_DIR"] = os.path.join(inductor, "triton")
    t0 = time.perf_counter()
    import torch

    if a.pcompile:
        import pcompile

        pcompile.install()
    if os.environ.get("PCOMPILE_AOT_KEY_DUMP"):
        from pcompile.compat.warm_runtime import dump_aot_keys

        dump_aot_keys(os.environ["PCOMPILE_AOT_KEY_DUMP"])
    sys.argv = [a.script, *a.args]
    runpy.run_path(a.script, run_name="__main__")
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    from torch._dynamo.utils import counters

    c = {"fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"], "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
         "autograd_cache_hit": counters["aot_autograd"]["autograd_cache_hit"], "autograd_cache_miss": counters["aot_autograd"]["autograd_cache_miss"],
         "wall_s": round(wall, 2), "pcompile": a.pcompile, "device": torch.cuda.get_device_name(0)}
    print("CACHE " + json.dumps(c), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(c, fh)


if __name__ == "__main__":
    main()

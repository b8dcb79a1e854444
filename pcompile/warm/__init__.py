"""`pcompile warm`: fill the graph caches for a training script on a host with no GPU.

Flow: runner.py (the CLI process) builds the virtual device (pcompile/vdev), resolves the
target's device profile, and starts child.py with the device preloaded. The child runs the
unchanged script on fake tensors (compat.py holds every private-torch adjustment this needs),
stops after N steps (stop.py), and reports; report.py turns that into the end-of-warm lines.

Contract with the GPU job, for its lookups to hit what the warm wrote:
- the same torch, triton and cuDNN, and the board of the profile (`pcompile profile` on it);
- the same pcompile cache dir (Inductor's caches live in <cache dir>/inductor);
- the same pcompile-installed state: pcompile.install() changes torch._functorch config values
  that AOTAutograd hashes into its keys, so a warm with pcompile installed matches a GPU job with
  pcompile (backend="pcompile" or pcompile.install()), and PCOMPILE_DISABLE=1 matches a stock job.
"""
from __future__ import annotations

"""`pcompile warm`: fill the graph caches for an unchanged training script on a host with no GPU.

Flow: runner.py (the CLI process, which never imports torch) builds the virtual device
(pcompile/vdev: a compile-only libcuda.so.1 and a libnvidia-ml.so.1, preloaded into the child
only), resolves the target's device profile, and starts child.py. The child runs the script as
`__main__`, stops after N steps (stop.py), and reports; report.py turns that into the summary.

How the script runs -- the mechanism, and why this one:
- **CPU code runs for real; only CUDA tensors are virtual.** The script runs under one
  *device-scoped fake mode* (compat/warm_fakes.new_fake_mode): an op that touches CUDA (a CUDA tensor or
  `device="cuda"`) runs on fake tensors, which carry shape, dtype, strides and device but no
  memory; every other op runs for real. So numpy/memmap loaders, DataLoader workers and
  pin_memory, tokenizers, model construction and weight init on CPU (any library), and the
  script's CPU bookkeeping behave exactly as on a GPU host, and Dynamo sees the same tensors
  (CUDA, same metadata) as the GPU job, so its graphs and keys are the GPU job's.
- Alternatives: (a) every tensor fake (the previous design) failed on public scripts, measured:
  CPU indexing of a memmap, CPU schedules read with `.item()`, eval bookkeeping; (b) no fakes,
  virtual-device memory backed by host pages (considered, not built): eager CUDA ops outside
  compiled code (cuBLAS, cuDNN, NCCL) would each need a device library that runs, and weights
  moved to the GPU would occupy host memory. The fake mode keeps Dynamo's inputs identical, costs no device memory, and needs no
  library below torch to compute anything.
- **Host data keeps its values; other GPU values read back are zeros** (compat/warm_values.py,
  reads.py): tensors the script makes from its own host data (labels, masks, indices) carry their
  real values through cheap ops, so data-dependent counts and branches follow the GPU path;
  `.item()`, `float()`, `.cpu()`, `.tolist()`, `bool()`, copies into CPU tensors and
  value-dependent ops on anything else (model outputs) see a GPU whose memory holds zeros; each
  such read is counted and its script line listed in the summary.
- **Never a silent hang or crash** (watch.py): no progress for PCOMPILE_WARM_STALL_SECONDS stops
  the warm with every thread's Python stack; a crash is named by signal and script line; the
  script's exit status is passed through.
- **The user's files are safe**: the child runs in a copy-on-write view of the whole file
  system (sandbox.py, mounts.py: overlayfs in a private mount namespace; isolation.py picks the
  mode and starts the node compile daemon outside it), so every write of the script and of every
  process it starts lands in `<cache dir>/warm-runs/<time>-<script>/files/<path>`; where
  namespaces are unavailable, a Python redirect (writes.py, paths.py, inherit/) does the same for
  Python code. Saves of virtual tensors are skipped in both (writes.py).
- **The host's GPUs never matter**: the child sees the virtual device(s) through CUDA, NVML and
  CUDA_VISIBLE_DEVICES alike, and no warm process initialises the host's driver.
- **Compile modes**: GPU timings (max-autotune choices, fusion benchmarks) are not faked into the
  caches: every candidate kernel is compiled, and the graphs that needed a timing are left for
  the GPU job to tune and publish (compat/warm_timings.py: fake_gpu_timings, keep_tuned_graphs_unpublished).

Contract with the GPU job, for its lookups to hit what the warm wrote:
- the same torch, triton and cuDNN, and the board of the profile (`pcompile profile` on it);
- the same pcompile cache dir (Inductor's caches live in <cache dir>/inductor);
- the same pcompile-installed state: pcompile's hooks change torch._functorch config values that
  AOTAutograd hashes into its keys, so a warm (whose child turns the hooks on at once) matches a
  GPU job with pcompile (backend="pcompile", pcompile.install() or PCOMPILE=1: hooks on at its first
  torch.compile call), and PCOMPILE_DISABLE=1 matches a stock job.
"""
from __future__ import annotations

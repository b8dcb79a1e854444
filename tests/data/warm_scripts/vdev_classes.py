"""A training script exercising the virtual device: storage identity, copies, CUDA graphs, the
allocator setting and event timing (pcompile issue 25, classes 6-10), and an eager launch of a
user-defined Triton kernel."""
import os

os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")  # class 9: set by the script itself
import copy

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.body = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32))
        self.head = nn.Linear(32, 64, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("scale", torch.tensor([0.5]))  # small, from host data

    def forward(self, idx):
        return self.head(self.body(self.emb(idx)) * self.scale)


model = Net().cuda()
print("class9 ok: model on", next(model.parameters()).device, "with", os.environ["PYTORCH_ALLOC_CONF"])

# class 6: distinct storages have distinct non-zero pointers and disjoint extents; ties and views share
groups = {}
for name, t in model.state_dict().items():
    groups.setdefault((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()), []).append(name)
shared = [sorted(g) for g in groups.values() if len(g) > 1]
assert shared == [["emb.weight", "head.weight"]], shared
spans = sorted((p, p + n) for p, n in groups)
assert all(p != 0 for p, _ in spans) and all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
w = model.body[0].weight
assert w[1:].data_ptr() == w.data_ptr() + w.stride(0) * w.element_size()
assert model.body[0].weight.data_ptr() == w.data_ptr()  # stable
print("class6 ok:", len(groups), "storages, one tie")

# class 7: deepcopy (EMA, frozen reference), clone, storage copy
ema = copy.deepcopy(model)
ref = copy.deepcopy(model).requires_grad_(False)
for _ in range(3):
    copy.deepcopy(model)
assert ema.head.weight is ema.emb.weight and ema.body[0].weight.data_ptr() != model.body[0].weight.data_ptr()
assert ema.scale.device.type == "cuda" and ema.scale.shape == (1,)
c = model.body[0].bias.detach().clone()
s = model.body[0].bias.untyped_storage().clone()
assert c.data_ptr() != model.body[0].bias.data_ptr() and s.nbytes() == model.body[0].bias.untyped_storage().nbytes()
print("class7 ok: ema, reference model, clones")

# class 8: capture and replay a CUDA graph
static_idx = torch.randint(0, 64, (4, 8), device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    ref(static_idx)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g), torch.no_grad():
    static_out = ref(static_idx)
for _ in range(2):
    g.replay()
torch.cuda.synchronize()
print("class8 ok: graph replayed, out", tuple(static_out.shape))

# class 10: event timing
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
model(static_idx)
end.record()
torch.cuda.synchronize()
ms = start.elapsed_time(end)
tokens_per_s = static_idx.numel() / (ms / 1000)
assert ms > 0 and tokens_per_s > 0
print(f"class10 ok: {ms:.3f} ms")

# a user-defined Triton kernel launched eagerly (outside torch.compile) on virtual tensors: its
# launcher asks the driver whether each pointer argument is device memory
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


src = model.body[0].weight.detach().reshape(-1)
dst = torch.empty_like(src)
scale_kernel[(triton.cdiv(src.numel(), 256),)](src, dst, src.numel(), BLOCK=256)
print("triton ok: eager launch on", dst.device)

opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = torch.compile(model)
for it in range(3):
    idx = torch.randint(0, 64, (4, 8), device="cuda")
    loss = nn.functional.cross_entropy(step(idx).view(-1, 64), idx.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for pe, p in zip(ema.parameters(), model.parameters()):
            pe.mul_(0.99).add_(p, alpha=0.01)
print("done")

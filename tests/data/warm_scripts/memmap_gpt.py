"""The patterns of public training scripts that a warm must run unchanged (nanoGPT-style):
a numpy memmap loader indexed with a CPU tensor, a CPU schedule read with .item(), tied weights,
an eval loop keeping losses in a CPU tensor, best-checkpoint logic, a log file appended to, and
isfinite checks on the loss. Run with the data file made by `make_data()` in the working dir."""
import os, math, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

device = 'cuda'
block, B = 32, 4
if not os.path.exists('train.bin'):
    np.random.default_rng(0).integers(0, 128, size=20000).astype(np.uint16).tofile('train.bin')
data = np.memmap('train.bin', dtype=np.uint16, mode='r')

def get_batch():
    ix = torch.randint(len(data) - block, (B,))
    x = torch.stack([torch.from_numpy((data[i:i+block]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i+1:i+1+block]).astype(np.int64)) for i in ix])
    return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(128, 64)
        dpr = [x.item() for x in torch.linspace(0, 0.1, 2)]   # timm-style CPU schedule
        self.drop = nn.Dropout(dpr[1])
        self.fc = nn.Linear(64, 64)
        self.head = nn.Linear(64, 128, bias=False)
        self.wte.weight = self.head.weight  # tied
    def forward(self, x, y):
        h = self.drop(F.gelu(self.fc(self.wte(x))))
        logits = self.head(h)
        return F.cross_entropy(logits.view(-1, 128), y.view(-1))

model = M().to(device)
print("tied:", model.wte.weight is model.head.weight, "params", sum(p.numel() for p in model.parameters()))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
cmodel = torch.compile(model)

@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(3)
    for k in range(3):
        X, Y = get_batch()
        loss = cmodel(X, Y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()

best = 1e9
os.makedirs('out', exist_ok=True)
for it in range(4):
    if it % 2 == 0:
        val = estimate_loss()
        print(f"iter {it}: val {val:.4f}")
        if val < best:
            best = val
            torch.save({'model': model.state_dict(), 'best': best}, os.path.join('out', 'ckpt.pt'))
    X, Y = get_batch()
    with torch.autocast('cuda', dtype=torch.bfloat16):
        loss = cmodel(X, Y)
    loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    with open('out/log.txt', 'a') as f:
        f.write(f"{it} {loss.item():.4f}\n")
    if not math.isfinite(loss.item()):
        raise SystemExit("loss is not finite")
    print(f"iter {it} loss {loss:.4f}", flush=True)

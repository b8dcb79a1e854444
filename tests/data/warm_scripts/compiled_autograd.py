"""Compiled autograd on the GPU: the backward inside a compiled training step is captured while
autograd runs (torch._dynamo.config.compiled_autograd), and the context-manager form with a hook."""
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch._dynamo.config.compiled_autograd = True
cmodel = torch.compile(model)


@torch.compile
def train_step(x):
    loss = cmodel(x).pow(2).mean()
    loss.backward()
    return loss


for _ in range(2):
    train_step(torch.randn(4, 16, device="cuda"))
    opt.step()
    opt.zero_grad()
torch._dynamo.config.compiled_autograd = False

y = torch.randn(4, 16, device="cuda", requires_grad=True)
y.register_hook(lambda g: g * 2)
out = cmodel(y).sum()
with torch._dynamo.compiled_autograd._enable(torch.compile(fullgraph=True)):
    out.backward()
print("compiled autograd ok:", tuple(y.grad.shape))

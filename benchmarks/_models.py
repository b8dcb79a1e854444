"""The benchmark models as training steps: built from configs (no weight downloads), fixed seeds.

Full size (the GPU machine): GPT-2 124M at batch 8x512, a Llama-style decoder (8 layers,
hidden 1024, GQA, seq 512), ResNet-50 at batch 32x224. `tiny-*` variants keep the same code
paths small enough to smoke-test on a CPU. Dropout is off so that stock and pcompile losses
can be compared step by step.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

FULL = ("gpt2", "llama", "resnet50", "gpt2-dyn")
TINY = ("tiny-gpt2", "tiny-llama", "tiny-resnet", "tiny-gpt2-dyn")


@dataclasses.dataclass
class Workload:
    model: Any
    batch: dict[str, Any]
    loss: Callable[[Any, dict[str, Any]], Any]  # (compiled model, batch) -> scalar loss
    description: str
    compile_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def _need(module: str, pip_name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SystemExit(f"benchmark model needs {pip_name}: pip install {pip_name}") from None


def _lm_batch(vocab: int, batch: int, seq: int, device: str) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    return {"input_ids": ids.to(device), "labels": ids.to(device)}


def _lm_loss(model: Any, batch: dict[str, Any]) -> Any:
    return model(input_ids=batch["input_ids"], labels=batch["labels"]).loss


def _gpt2(device: str, tiny: bool) -> Workload:
    tf = _need("transformers", "transformers")
    kw = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    if tiny:
        cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=128, bos_token_id=0,
                             eos_token_id=0, **kw)
        b, s = 2, 64
    else:
        cfg = tf.GPT2Config(**kw)  # 124M: 12 layers, 768 hidden, 12 heads, vocab 50257
        b, s = 8, 512
    model = tf.GPT2LMHeadModel(cfg)
    return Workload(model, _lm_batch(cfg.vocab_size, b, s, device), _lm_loss, f"GPT-2 {cfg.n_layer}L/{cfg.n_embd}, batch {b}x{s}")


def _gpt2_dynamic(device: str, tiny: bool) -> Workload:
    """GPT-2 compiled with dynamic=True, fed two sequence lengths in turn (full, then half)."""
    w = _gpt2(device, tiny)
    full = w.batch
    seq = full["input_ids"].shape[1]
    half = {k: v[:, : seq // 2].contiguous() for k, v in full.items()}
    turn = [0]

    def loss(m: Any, _bt: dict[str, Any]) -> Any:
        bt = (full, half)[turn[0] % 2]
        turn[0] += 1
        return _lm_loss(m, bt)

    return Workload(w.model, full, loss, w.description + f" and {seq // 2} in turn, dynamic=True", {"dynamic": True})


def _llama(device: str, tiny: bool) -> Workload:
    tf = _need("transformers", "transformers")
    if tiny:
        cfg = tf.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             bos_token_id=0, eos_token_id=0)
        b, s = 2, 64
    else:
        cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                             num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=2048)
        b, s = 8, 512
    model = tf.LlamaForCausalLM(cfg)
    return Workload(model, _lm_batch(cfg.vocab_size, b, s, device), _lm_loss,
                    f"Llama-style {cfg.num_hidden_layers}L/{cfg.hidden_size}, batch {b}x{s}")


def _resnet(device: str, tiny: bool) -> Workload:
    import torch

    tv = _need("torchvision", "torchvision")
    if tiny:
        from torchvision.models.resnet import BasicBlock, ResNet

        model, b, hw, classes = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10), 4, 32, 10
    else:
        model, b, hw, classes = tv.models.resnet50(weights=None), 32, 224, 1000
    g = torch.Generator().manual_seed(1)
    batch = {"x": torch.randn(b, 3, hw, hw, generator=g).to(device),
             "y": torch.randint(0, classes, (b,), generator=g).to(device)}

    def loss(m: Any, bt: dict[str, Any]) -> Any:
        return torch.nn.functional.cross_entropy(m(bt["x"]), bt["y"])

    return Workload(model, batch, loss, f"ResNet-{'tiny' if tiny else '50'}, batch {b}x{hw}x{hw}")


_BUILDERS = {"gpt2": _gpt2, "llama": _llama, "resnet50": _resnet, "gpt2-dyn": _gpt2_dynamic}


def build(name: str, device: str) -> Workload:
    """The named workload on `device`, weights from torch.manual_seed(0)."""
    import torch

    tiny = name.startswith("tiny-")
    base = {"tiny-resnet": "resnet50"}.get(name, name.removeprefix("tiny-"))
    if base not in _BUILDERS:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(FULL + TINY)}")
    torch.manual_seed(0)
    w = _BUILDERS[base](device, tiny)
    w.model.to(device).train()
    return w

#!/usr/bin/python3
"""Builds a small byte-level GPT, scripts it with TorchScript and saves it as
models/fortunes_gpt.pt (what configs/fortunes_gpt.yaml trains on the fortunes corpus).

Input: (batch, T) int64 byte tokens, T <= block_size (128). Output: (batch, T, 256) logits,
position t predicting token t + 1. Pre-LayerNorm transformer: token and position embeddings,
4 blocks of causal self-attention (4 heads) and a GELU MLP (4x), a final LayerNorm, and an
output layer that is the token embedding (tied weights: logits = x @ wte.weight^T, so the
embedding is one parameter, `wte.weight`, in the module, the trainer's checkpoints and
model.h5). No dropout and no buffers (the causal mask is made in forward), so a run resumes
bitwise. 128 wide: 842,496 parameters.

Usage: /usr/bin/python3 models/fortunes_gpt.py [--output FILE] [--seed S] [--width D]
       [--layers L] [--heads H] [--block-size T]
(torch 1.13, python3-torch). The initial weights come from torch.manual_seed(S) (GPT-2's:
normal(0, 0.02), biases 0, LayerNorm 1 and 0), so the committed file is reproducible.
`GPT` is importable: a model the trainer saved loads back with
GPT(...).load_state_dict(weights from model.h5).
"""
import argparse
import math
import os

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)  # (b, heads, t, head size)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, width=128, layers=4, heads=4, block_size=128, vocab=256):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block_size, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.size(1)
        positions = torch.arange(t, dtype=torch.long, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        x = self.ln_f(self.blocks(x))
        return F.linear(x, self.wte.weight)  # the output layer is the token embedding


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(here, "fortunes_gpt.pt"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = GPT(args.width, args.layers, args.heads, args.block_size)
    scripted = torch.jit.script(model)
    out = scripted(torch.zeros(2, args.block_size, dtype=torch.long))
    assert out.shape == (2, args.block_size, 256), out.shape
    scripted.save(args.output)
    params = sum(p.numel() for p in model.parameters())
    print(f"saved {args.output}: {params} parameters")


if __name__ == "__main__":
    main()

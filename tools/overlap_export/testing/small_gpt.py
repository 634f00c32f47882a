"""A small GPT in plain torch.nn: token and position embeddings, pre-norm blocks of causal
self-attention (nn.Linear projections, softmax of masked scores) and a GELU MLP, a final
layer norm and a language-model head tied to the token embedding (one storage, two
names): what the exporter's tied-weight handling and the executor's kernels meet in real
language models, at test sizes."""

import math

import torch
from torch import nn


class Block(nn.Module):

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.dim = dim
        self.ln_1 = nn.LayerNorm(dim)
        # No bias on the projection: attention is invariant to the key's bias (it shifts a
        # row of scores by a constant), so that bias's gradient is zero in exact arithmetic
        # and round-off noise in float32. SGD moves it by lr * noise, harmlessly; AdamW
        # divides by sqrt(v) and moves it by up to lr in a noise-chosen direction, so no two
        # float32 implementations (nor two orders of summation) train it alike. GPT-2-style
        # models without projection biases (nanoGPT bias=False, LLaMA) avoid the same thing.
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, s, d, h = x.shape[0], x.shape[1], self.dim, self.heads
        qkv = self.qkv(self.ln_1(x))
        q, k, v = qkv[:, :, :d], qkv[:, :, d:2 * d], qkv[:, :, 2 * d:]
        q = q.view(b, s, h, d // h).transpose(1, 2)
        k = k.view(b, s, h, d // h).transpose(1, 2)
        v = v.view(b, s, h, d // h).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)
        # The causal mask from the scores themselves (torch.fx traces ops on traced values,
        # not constructors called with a traced size).
        # -1e4, not -inf: the graph format has no spelling for non-finite constants yet
        # (docs/interop.md); exp(-1e4 - max) is 0 in float32 all the same.
        future = torch.ones_like(scores, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, -1e4)
        y = scores.softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.out(nn.functional.gelu(self.fc(self.ln_2(x))))


class SmallGpt(nn.Module):

    def __init__(self, vocab=64, dim=32, heads=4, layers=2, max_seq=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_seq, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, tokens):
        # Position embeddings as the first rows of the table (a parameter: torch.fx traces
        # its slice; an arange of a traced length it cannot).
        x = self.wte(tokens) + self.wpe.weight[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def small_gpt(**kwargs):
    return SmallGpt(**kwargs)

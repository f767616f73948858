"""A GPT-2 written by hand in PyTorch with Hugging Face GPT2LMHeadModel's state-dict keys and
layouts: the reference for nabla's examples/gpt/gpt.h (tests/interop/gpt_torch_test.cpp through
torch_gpt2_logits.py, and bench/pytorch/gpt2_curve.py). The transformers package is not
installed, so this is the independent side. It runs on Debian's torch 1.13 (CPU) and on PyTorch
2.11 (GPU).

Keys: transformer.wte.weight, transformer.wpe.weight, transformer.h.{i}.ln_1.*,
.attn.c_attn.* (Conv1D, weight stored (in, out)), .attn.c_proj.*, .ln_2.*, .mlp.c_fc.*,
.mlp.c_proj.*, transformer.ln_f.*, lm_head.weight tied to wte, and the older files' buffers
.attn.bias (the causal mask) and .attn.masked_bias, which nabla accepts and ignores.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Conv1D(nn.Module):
    """GPT-2's projection: y = x W + b with W stored (in, out)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, width, heads, context, sdpa):
        super().__init__()
        self.c_attn, self.c_proj = Conv1D(width, 3 * width), Conv1D(width, width)
        self.heads, self.sdpa = heads, sdpa
        mask = torch.tril(torch.ones(context, context, dtype=torch.bool)).view(1, 1, context, context)
        self.register_buffer("bias", mask)
        self.register_buffer("masked_bias", torch.tensor(-1e4))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        if self.sdpa:  # PyTorch >= 2.0: fused kernels where the dtype allows
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the written-out formula
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
            scores = scores.masked_fill(~self.bias[:, :, :T, :T], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(width, 4 * width), Conv1D(4 * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width, heads, context, sdpa):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn, self.mlp = Attention(width, heads, context, sdpa), Mlp(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, vocab=50304, context=1024, layers=12, heads=12, width=768, sdpa=False):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width), wpe=nn.Embedding(context, width),
            h=nn.ModuleList([Block(width, heads, context, sdpa) for _ in range(layers)]),
            ln_f=nn.LayerNorm(width)))
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied
        self.vocab, self.layers = vocab, layers

    def init_nanogpt(self, generator):
        """nanoGPT's initialization, drawn from `generator`: N(0, 0.02) for matrices, residual
        projections (c_proj) scaled by 1/sqrt(2 * layers), zero biases, unit LayerNorm gains."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * self.layers) if name.endswith("c_proj.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

    def forward(self, tokens):
        t = self.transformer
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = t.wte(tokens) + t.wpe(positions)
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))

    def loss(self, tokens, targets):
        return F.cross_entropy(self(tokens).reshape(-1, self.vocab), targets.reshape(-1))

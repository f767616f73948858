"""A LLaMA written by hand in PyTorch with Hugging Face LlamaForCausalLM's state-dict keys and its
formulas (rotate_half rotary embeddings, repeat_kv for grouped-query attention, an RMSNorm computed
in at least float32, SwiGLU): the reference for nn::models::Llama (tests/interop/llama_torch_test.cpp
through torch_llama_logits.py). The transformers package is not installed, so this is the
independent side. It runs on Debian's torch 1.13 (CPU).

Keys: model.embed_tokens.weight, model.layers.{i}.input_layernorm.weight,
.self_attn.{q,k,v,o}_proj.weight, .self_attn.rotary_emb.inv_freq (a buffer older files carry),
.post_attention_layernorm.weight, .mlp.{gate,up,down}_proj.weight, model.norm.weight,
lm_head.weight.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        h = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x  # at least float32
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama3_inv_freq(inv_freq, scaling):
    """Hugging Face's "llama3" rope_scaling of the frequencies, by wavelength bands."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    slowed = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    blended = (1 - smooth) * slowed / factor + smooth * slowed
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return torch.where(medium, blended, slowed)


class Rotary(nn.Module):
    def __init__(self, dim, base, scaling=None):
        super().__init__()
        # Hugging Face keeps these in float32; in float64 here, so that a float64 model's angles
        # are as exact as nabla's (which computes its tables in float64).
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        if scaling is not None:
            inv_freq = llama3_inv_freq(inv_freq, scaling)
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, x, positions):
        angles = positions.to(self.inv_freq.dtype)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, width, heads, kv_heads, base, scaling=None):
        super().__init__()
        d = width // heads
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, kv_heads * d, bias=False)
        self.v_proj = nn.Linear(width, kv_heads * d, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)
        self.rotary_emb = Rotary(d, base, scaling)
        self.heads, self.kv_heads, self.d = heads, kv_heads, d

    def forward(self, x):
        B, T, C = x.shape
        positions = torch.arange(T, device=x.device)
        q = self.rotary_emb(self.q_proj(x).view(B, T, self.heads, self.d).transpose(1, 2), positions)
        k = self.rotary_emb(self.k_proj(x).view(B, T, self.kv_heads, self.d).transpose(1, 2), positions)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.d).transpose(1, 2)
        groups = self.heads // self.kv_heads
        k = k[:, :, None].expand(B, self.kv_heads, groups, T, self.d).reshape(B, self.heads, T, self.d)
        v = v[:, :, None].expand(B, self.kv_heads, groups, T, self.d).reshape(B, self.heads, T, self.d)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        y = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(width, hidden, bias=False)
        self.up_proj = nn.Linear(width, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, width, heads, kv_heads, hidden, base, eps, scaling=None):
        super().__init__()
        self.input_layernorm = RMSNorm(width, eps)
        self.self_attn = Attention(width, heads, kv_heads, base, scaling)
        self.post_attention_layernorm = RMSNorm(width, eps)
        self.mlp = Mlp(width, hidden)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):
    def __init__(self, vocab, layers, heads, kv_heads, width, hidden, base=10000.0, eps=1e-5,
                 scaling=None):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, width)
        self.model.layers = nn.ModuleList(
            [Layer(width, heads, kv_heads, hidden, base, eps, scaling) for _ in range(layers)])
        self.model.norm = RMSNorm(width, eps)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))

# PyTorch's side of `nabla-bench generate --compare-pytorch`: the same LLaMA-style model (768
# wide, 12 layers, 12 query / 4 key-value heads, SwiGLU 2048, vocab 32000, bf16 weights) generating
# greedily after a prompt, with a static key/value cache as Hugging Face's StaticCache keeps it:
# (B, kv_heads, capacity, D) per layer, the prompt in one pass, then one token per step written at
# a position held in a tensor (index_copy_), attention over the whole capacity with the later
# positions masked (Hugging Face's repeat_kv, then F.scaled_dot_product_attention with the mask; the
# prompt's pass with enable_gqa). Modes: eager (every op
# launched from Python), graph (each step after two warm-up steps one replay of a
# torch.cuda.CUDAGraph). --json: one JSON object per mode; {"skipped": reason} without torch or
# a GPU.
import argparse, json, sys, time
try:
    import torch, torch.nn as nn, torch.nn.functional as F
except ImportError as e:
    print(json.dumps({"skipped": f"python cannot import torch ({e})"})); sys.exit(3)
if not torch.cuda.is_available():
    print(json.dumps({"skipped": "PyTorch sees no CUDA GPU"})); sys.exit(3)
p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=1); p.add_argument("--prompt", type=int, default=512)
p.add_argument("--new-tokens", type=int, default=256); p.add_argument("--repeats", type=int, default=3)
p.add_argument("--modes", default="eager,graph"); p.add_argument("--json", action="store_true")
a = p.parse_args()
V, C, L, H, HKV, HID = 32000, 768, 12, 12, 4, 2048
D = C // H
CAP = a.prompt + a.new_tokens - 1  # what the generation fills, as nabla's cache


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.input_layernorm = nn.RMSNorm(C, eps=1e-5); s.post_attention_layernorm = nn.RMSNorm(C, eps=1e-5)
        s.q = nn.Linear(C, C, bias=False); s.k = nn.Linear(C, HKV * D, bias=False)
        s.v = nn.Linear(C, HKV * D, bias=False); s.o = nn.Linear(C, C, bias=False)
        s.gate = nn.Linear(C, HID, bias=False); s.up = nn.Linear(C, HID, bias=False); s.down = nn.Linear(HID, C, bias=False)

    def forward(s, x, cos, sin, kc, vc, pos, mask):
        # pos: positions of x's rows (T,), cos/sin already at those rows; mask None: a causal prompt.
        B, T, _ = x.shape
        h = s.input_layernorm(x)
        q = rotate(s.q(h).view(B, T, H, D).transpose(1, 2), cos, sin)
        k = rotate(s.k(h).view(B, T, HKV, D).transpose(1, 2), cos, sin)
        v = s.v(h).view(B, T, HKV, D).transpose(1, 2)
        kc.index_copy_(2, pos, k); vc.index_copy_(2, pos, v)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # Hugging Face's repeat_kv, then SDPA with the mask (a fused path takes it)
            kr = kc[:, :, None].expand(B, HKV, H // HKV, CAP, D).reshape(B, H, CAP, D)
            vr = vc[:, :, None].expand(B, HKV, H // HKV, CAP, D).reshape(B, H, CAP, D)
            y = F.scaled_dot_product_attention(q, kr, vr, attn_mask=mask)
        x = x + s.o(y.transpose(1, 2).reshape(B, T, C))
        h = s.post_attention_layernorm(x)
        return x + s.down(F.silu(s.gate(h)) * s.up(h))


def rotate(x, cos, sin):  # in float32, as nabla's rotary kernel, rounded back
    a_, b_ = x[..., : D // 2].float(), x[..., D // 2:].float()
    return torch.cat([a_ * cos - b_ * sin, b_ * cos + a_ * sin], -1).to(x.dtype)


class Llama(nn.Module):
    def __init__(s):
        super().__init__()
        s.embed = nn.Embedding(V, C); s.layers = nn.ModuleList([Block() for _ in range(L)])
        s.norm = nn.RMSNorm(C, eps=1e-5); s.head = nn.Linear(C, V, bias=False)
        # float32 tables (not buffers: they stay float32 when the weights go to bf16).
        inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        ang = torch.arange(CAP + 1, dtype=torch.float64)[:, None] * inv[None, :]
        s.cos, s.sin = ang.cos().float().cuda(), ang.sin().float().cuda()

    def forward(s, tokens, caches, pos, mask):
        cos, sin = s.cos[pos], s.sin[pos]
        x = s.embed(tokens)
        for layer, (kc, vc) in zip(s.layers, caches):
            x = layer(x, cos, sin, kc, vc, pos, mask)
        return s.head(s.norm(x[:, -1]))


@torch.no_grad()
def generate(m, prompt, graphed):
    B = prompt.shape[0]
    caches = [(torch.zeros(B, HKV, CAP, D, device="cuda", dtype=torch.bfloat16),
               torch.zeros(B, HKV, CAP, D, device="cuda", dtype=torch.bfloat16)) for _ in range(L)]
    out = torch.empty(B, a.new_tokens, dtype=torch.long, device="cuda")
    token = m(prompt, caches, torch.arange(a.prompt, device="cuda"), None).argmax(-1, keepdim=True)
    out[:, :1] = token
    pos = torch.full((1,), a.prompt, dtype=torch.long, device="cuda")
    slots = torch.arange(CAP, device="cuda")

    def step():
        nxt = m(token, caches, pos, (slots <= pos)[None, :]).argmax(-1, keepdim=True)
        token.copy_(nxt); pos.add_(1)
        return nxt

    i, graph = 1, None
    while i < a.new_tokens:
        if graphed and i == 3:  # two eager warm-up steps (on a side stream, as CUDA graphs ask), then capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_next = step()
        if graph is not None:
            graph.replay(); out[:, i:i + 1] = static_next
        else:
            s = torch.cuda.Stream() if graphed else None
            if s is not None:
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    out[:, i:i + 1] = step()
                torch.cuda.current_stream().wait_stream(s)
            else:
                out[:, i:i + 1] = step()
        i += 1
    return torch.cat([prompt, out], 1)


def run(mode):
    torch.manual_seed(0)
    m = Llama().cuda().to(torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(1)
    prompt = torch.randint(0, V, (a.batch, a.prompt), device="cuda", generator=g)
    generate(m, prompt, mode == "graph"); torch.cuda.synchronize()
    best = None
    for _ in range(a.repeats):
        t0 = time.perf_counter(); generate(m, prompt, mode == "graph"); torch.cuda.synchronize()
        s = time.perf_counter() - t0; best = s if best is None else min(best, s)
    row = {"bench": "generate", "mode": mode, "batch": a.batch, "prompt": a.prompt, "new_tokens": a.new_tokens,
           "ms_per_generate": round(best * 1000, 2), "tokens_s": round(a.batch * a.new_tokens / best, 1),
           "torch": torch.__version__}
    print(json.dumps(row) if a.json else row, flush=True)


for md in a.modes.split(","):
    run(md)

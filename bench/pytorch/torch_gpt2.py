# Copied from ../shared/bench/torch_gpt2.py (the PyTorch GPT-2 figures of TARGETS.md) so that it
# travels to the GPU machine with the repository; examples/gpt/train_gpt --bench prints the same line.
# Anchor: PyTorch GPT-2 (124M) training throughput on one GPU, synthetic tokens.
# nanoGPT's model: 12 layers, 12 heads, 768 wide, vocab 50304, context 1024, tied embeddings,
# GELU(tanh), LayerNorm, F.scaled_dot_product_attention(is_causal=True) (flash attention),
# AdamW(fused=True) lr 6e-4 betas (0.9, 0.95) wd 0.1 on 2-d weights, grad-norm clip 1.0,
# bf16 autocast. Prints one dict per mode: eager, then torch.compile.
#   python3 torch_gpt2.py [--batch 16] [--modes eager,compile] [--steps 30] [--json]
# --json (nabla-bench gpt --compare-pytorch): one JSON object per mode, with "bench": "gpt", and
# {"skipped": reason} when torch or a GPU is missing.
import argparse, json, math, sys, time
try:
    import torch, torch.nn as nn, torch.nn.functional as F
except ImportError as e:
    print(json.dumps({"skipped": f"python cannot import torch ({e})"})); sys.exit(3)
if not torch.cuda.is_available():
    print(json.dumps({"skipped": "PyTorch sees no CUDA GPU"})); sys.exit(3)
p = argparse.ArgumentParser()
p.add_argument("--json", action="store_true")
p.add_argument("--batch", type=int, default=16); p.add_argument("--seq", type=int, default=1024)
p.add_argument("--steps", type=int, default=30); p.add_argument("--warmup", type=int, default=10)
p.add_argument("--modes", default="eager,compile"); a = p.parse_args()
V, L, H, C = 50304, 12, 12, 768
torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.ln_1 = nn.LayerNorm(C); s.c_attn = nn.Linear(C, 3 * C); s.c_proj = nn.Linear(C, C)
        s.ln_2 = nn.LayerNorm(C); s.c_fc = nn.Linear(C, 4 * C); s.mlp_proj = nn.Linear(4 * C, C)
    def forward(s, x):
        B, T, _ = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, 2)
        q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + s.c_proj(y)
        return x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate="tanh"))
class GPT(nn.Module):
    def __init__(s):
        super().__init__(); s.wte = nn.Embedding(V, C); s.wpe = nn.Embedding(a.seq, C)
        s.h = nn.ModuleList([Block() for _ in range(L)]); s.ln_f = nn.LayerNorm(C)
        s.lm_head = nn.Linear(C, V, bias=False); s.lm_head.weight = s.wte.weight
        for n, prm in s.named_parameters():
            if prm.dim() == 2: nn.init.normal_(prm, 0.0, 0.02 / (math.sqrt(2 * L) if n.endswith("proj.weight") else 1))
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.h: x = b(x)
        logits = s.lm_head(s.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
def run(mode):
    torch.manual_seed(0); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    m = GPT().cuda()
    decay = [q for q in m.parameters() if q.dim() >= 2]; rest = [q for q in m.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    f = torch.compile(m) if mode == "compile" else m
    g = torch.Generator(device="cuda").manual_seed(1)
    data = torch.randint(0, V, (a.batch, a.seq + 1), device="cuda", generator=g)
    x, y = data[:, :-1], data[:, 1:]
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16): loss = f(x, y)
        loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=True)
        return loss
    t0 = time.time()
    for _ in range(a.warmup): step()
    torch.cuda.synchronize(); tw = time.time() - t0
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(a.steps): loss = step()
    e.record(); torch.cuda.synchronize(); ms = s.elapsed_time(e) / a.steps
    row = {"mode": mode, "batch": a.batch, "seq": a.seq, "params_M": round(sum(q.numel() for q in m.parameters()) / 1e6, 1),
           "ms_per_step": round(ms, 2), "tokens_s": round(a.batch * a.seq * 1000 / ms), "peak_alloc_GiB": round(torch.cuda.max_memory_allocated() / 2**30, 2),
           "warmup_s": round(tw, 1), "loss": round(float(loss), 4), "torch": torch.__version__}
    print(json.dumps({"bench": "gpt", **row}) if a.json else row, flush=True)
for md in a.modes.split(","): run(md)

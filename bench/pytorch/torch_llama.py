# Copied from ../shared/bench/torch_llama.py (the PyTorch figures issue 43 is measured against) so
# that it travels to the GPU machine with the repository; nabla-bench llama is the same model
# written plainly in nabla. --json (nabla-bench llama --compare-pytorch): one JSON object per
# mode ("eager", "compile"), with "bench": "llama", and {"skipped": reason} when torch or a GPU
# is missing.
# Anchor for llama_user bench: the same LLaMA-style model in PyTorch 2.x as its users write it:
# nn.RMSNorm, rotary halves, F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), SwiGLU,
# untied head, AdamW(fused=True), bf16 autocast, clip 1.0. 768 wide, 12 layers, 12 q / 4 kv heads,
# hidden 2048, vocab 32000, T 1024. Prints one dict per mode (eager, compile).
# --trace FILE (nabla's addition, after the timing): the kernels of --trace-steps more steps, from
# torch.profiler, as a CSV in tools/cupti_trace's format ("%m" in FILE becomes the mode), so that
# tools/cupti_trace/summarize.py reads PyTorch's step as it reads nabla's.
import argparse, json, sys, time
try:
    import torch, torch.nn as nn, torch.nn.functional as F
except ImportError as e:
    print(json.dumps({"skipped": f"python cannot import torch ({e})"})); sys.exit(3)
if not torch.cuda.is_available():
    print(json.dumps({"skipped": "PyTorch sees no CUDA GPU"})); sys.exit(3)
p = argparse.ArgumentParser(); p.add_argument("--batch", type=int, default=16); p.add_argument("--steps", type=int, default=20)
p.add_argument("--warmup", type=int, default=8); p.add_argument("--modes", default="eager,compile")
p.add_argument("--json", action="store_true"); p.add_argument("--trace", default="")
p.add_argument("--trace-steps", type=int, default=6); a = p.parse_args()
V, C, L, H, HKV, HID, T = 32000, 768, 12, 12, 4, 2048, 1024
D = C // H
torch.backends.cuda.matmul.allow_tf32 = True
def rope_tables(dev):
    inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32, device=dev) / D)
    ang = torch.arange(T, dtype=torch.float32, device=dev)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()
def rope(x, cos, sin):
    a, b = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(x.dtype)
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.attention_norm = nn.RMSNorm(C, eps=1e-5); s.ffn_norm = nn.RMSNorm(C, eps=1e-5)
        s.wq = nn.Linear(C, C, bias=False); s.wk = nn.Linear(C, HKV * D, bias=False); s.wv = nn.Linear(C, HKV * D, bias=False)
        s.wo = nn.Linear(C, C, bias=False)
        s.w1 = nn.Linear(C, HID, bias=False); s.w2 = nn.Linear(HID, C, bias=False); s.w3 = nn.Linear(C, HID, bias=False)
    def forward(s, x, cos, sin):
        B = x.shape[0]; h = s.attention_norm(x)
        q = rope(s.wq(h).view(B, T, H, D).transpose(1, 2), cos, sin)
        k = rope(s.wk(h).view(B, T, HKV, D).transpose(1, 2), cos, sin)
        v = s.wv(h).view(B, T, HKV, D).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + s.wo(y.transpose(1, 2).reshape(B, T, C))
        h = s.ffn_norm(x)
        return x + s.w2(F.silu(s.w1(h)) * s.w3(h))
class Llama(nn.Module):
    def __init__(s):
        super().__init__(); s.tok_embeddings = nn.Embedding(V, C); s.layers = nn.ModuleList([Block() for _ in range(L)])
        s.norm = nn.RMSNorm(C, eps=1e-5); s.output = nn.Linear(C, V, bias=False)
    def forward(s, idx, tgt):
        cos, sin = rope_tables(idx.device); x = s.tok_embeddings(idx)
        for b in s.layers: x = b(x, cos, sin)
        return F.cross_entropy(s.output(s.norm(x)).reshape(-1, V), tgt.reshape(-1))
def run(mode):
    torch.manual_seed(0); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    m = Llama().cuda()
    decay = [q for n, q in m.named_parameters() if q.dim() >= 2 and "tok_embeddings" not in n]
    rest = [q for n, q in m.named_parameters() if not (q.dim() >= 2 and "tok_embeddings" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    f = torch.compile(m) if mode == "compile" else m
    g = torch.Generator(device="cuda").manual_seed(1)
    data = torch.randint(0, V, (a.batch, T + 1), device="cuda", generator=g); x, y = data[:, :-1], data[:, 1:]
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16): loss = f(x, y)
        loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=True)
        return loss
    t0 = time.time()
    for _ in range(a.warmup): step()
    torch.cuda.synchronize(); tw = time.time() - t0; torch.cuda.reset_peak_memory_stats()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(a.steps): loss = step()
    e.record(); torch.cuda.synchronize(); ms = s.elapsed_time(e) / a.steps
    row = {"mode": "llama_" + mode, "batch": a.batch, "params_M": round(sum(q.numel() for q in m.parameters()) / 1e6, 1),
           "ms_per_step": round(ms, 2), "tokens_s": round(a.batch * T * 1000 / ms), "peak_alloc_GiB": round(torch.cuda.max_memory_allocated() / 2**30, 2),
           "warmup_s": round(tw, 1), "loss": round(float(loss), 4), "torch": torch.__version__}
    print(json.dumps({"bench": "llama", **row, "mode": mode}) if a.json else row, flush=True)
    if a.trace: trace(step, a.trace.replace("%m", mode))
def trace(step, path):
    import csv, decimal, os, tempfile
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.trace_steps): step()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        chrome = os.path.join(d, "trace.json"); prof.export_chrome_trace(chrome)
        # Decimal: "ts" may be microseconds since the epoch, past a double's nanosecond precision.
        with open(chrome) as f: events = json.load(f, parse_float=decimal.Decimal)["traceEvents"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f); w.writerow(["kind", "stream", "start_ns", "end_ns", "name"])
        for e in events:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e:
                start = int(e["ts"] * 1000)  # an int or a Decimal, exact either way
                w.writerow([e["cat"], e.get("args", {}).get("stream", 0), start, start + int(e["dur"] * 1000), e["name"]])
for md in a.modes.split(","): run(md)

# A copy of ../shared/bench/torch_ckpt.py that reports a failing configuration and goes on (the
# shared script stops at FP32 with 8 segments, where PyTorch fails on in-place ReLU, and never
# reaches AMP), and takes the modes to run as arguments: python3 torch_ckpt_each.py [fp32] [amp16]
# Anchor: gradient checkpointing on ResNet-50 in PyTorch: peak memory and throughput, with and without.
import time, torch, torchvision
from torch.utils.checkpoint import checkpoint_sequential
torch.backends.cudnn.benchmark = True
def run(mode, segments, batch=256, warm=8, iters=20):
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats(); torch.manual_seed(0)
    r = torchvision.models.resnet50().cuda()
    cl = mode != "fp32"
    if cl: r = r.to(memory_format=torch.channels_last)
    body = torch.nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, *r.layer1, *r.layer2, *r.layer3, *r.layer4)
    head = torch.nn.Sequential(r.avgpool, torch.nn.Flatten(), r.fc)
    opt = torch.optim.SGD(r.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    if cl: x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(segments > 0)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    scaler = torch.amp.GradScaler("cuda", enabled=mode == "amp16")
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=mode == "amp16"):
            h = checkpoint_sequential(body, segments, x, use_reentrant=False) if segments else body(x)
            loss = torch.nn.functional.cross_entropy(head(h), y)
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    for _ in range(warm): step()
    torch.cuda.synchronize(); t = time.time()
    for _ in range(iters): step()
    torch.cuda.synchronize(); dt = (time.time() - t) / iters
    print({"mode": mode, "segments": segments, "img_s": round(batch / dt, 1), "peak_alloc_GiB": round(torch.cuda.max_memory_allocated() / 2**30, 2)}, flush=True)
import sys
for mode in (sys.argv[1:] or ("fp32", "amp16")):
    for seg in (0, 4, 8):
        try:
            run(mode, seg)
        except RuntimeError as e:
            print({"mode": mode, "segments": seg, "error": str(e).split(".")[0]}, flush=True)

# Reference for tests/amp/cuda/amp_test.cpp's ResNet-50 step: how close are PyTorch's own fp16/bf16
# autocast gradients to its float32 gradients (TF32 off), for a freshly initialised ResNet-50,
# batch 64, channels_last, inputs uniform in +-[0.1, 2], random labels?
import torch, torchvision
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
ref = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
amp = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
amp.load_state_dict(ref.state_dict())
u = torch.rand(64, 3, 224, 224, device="cuda"); s = torch.rand_like(u)
x = ((0.1 + 1.9 * u) * torch.where(s < 0.5, -1.0, 1.0)).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (64,), device="cuda")
loss_ref = torch.nn.functional.cross_entropy(ref(x), y); loss_ref.backward()
def cos(a, b):
    a = torch.cat([t.flatten().double() for t in a]); b = torch.cat([t.flatten().double() for t in b])
    return float((a @ b) / (a.norm() * b.norm()))
for dt in (torch.float16, torch.bfloat16):
    amp.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dt):
        loss = torch.nn.functional.cross_entropy(amp(x), y)
    scale = 65536.0 if dt == torch.float16 else 1.0
    (loss * scale).backward()
    g = [p.grad / scale for p in amp.parameters()]
    gr = [p.grad for p in ref.parameters()]
    finite = all(torch.isfinite(t).all() for t in g)
    print({"dtype": str(dt), "loss": float(loss), "loss_fp32": float(loss_ref), "finite_at_65536": bool(finite),
           "cos_all": cos(g, gr), "cos_fc": cos([amp.fc.weight.grad], [ref.fc.weight.grad]),
           "cos_layer4_0_conv1": cos([amp.layer4[0].conv1.weight.grad], [ref.layer4[0].conv1.weight.grad])}, flush=True)

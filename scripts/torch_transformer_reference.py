"""A PyTorch rebuild of train_transformer's model and recipe, to tell tessera's training behaviour
from the recipe's (docs/results.md, section 2). Reference only, run on the GPU node, which has
PyTorch; never a dependency of tessera.

  python3 scripts/torch_transformer_reference.py GCIDE_TXT LR BETA2 WEIGHT_DECAY STEPS

The model: byte-level, context 4096, batch 8, width 512, 8 layers, 8 heads, pre-LN GPT with learned
positions and a tied output, biases on, PyTorch's default Linear init (uniform 1/sqrt(in), as
tessera's nn::Linear), N(0, 0.02) embeddings; AdamW on every parameter, 200 linear warm-up steps
then constant, clip 1.0, bf16 autocast with SDPA's causal attention; gcide cut into 1,000,000-byte
chunks, chunk c to val where c % 20 == 18 and to train where c % 20 < 18, as --split interleaved does.
Prints the loss and gradient norm every 50 steps and the val loss (8 batches) every 250, in
train_transformer's log format.
"""
import sys, time, math, torch, torch.nn as nn, torch.nn.functional as F
path, lr, beta2, wd, steps = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
torch.manual_seed(1)
raw = open(path, 'rb').read()
vocab = sorted(set(raw)); lut = torch.zeros(256, dtype=torch.long); lut[list(vocab)] = torch.arange(len(vocab))
data = lut[torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()]
chunks = [data[c:c + 1000000] for c in range(0, len(data), 1000000)]
train = torch.cat([ch for i, ch in enumerate(chunks) if i % 20 < 18]).cuda()
val = torch.cat([ch for i, ch in enumerate(chunks) if i % 20 == 18]).cuda()
V, T, C, L, H, B = len(vocab), 4096, 512, 8, 8, 8
print(f"vocab {V} train {len(train)} val {len(val)}", flush=True)
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.ln1 = nn.LayerNorm(C); s.qkv = nn.Linear(C, 3 * C); s.proj = nn.Linear(C, C)
        s.ln2 = nn.LayerNorm(C); s.fc = nn.Linear(C, 4 * C); s.fc2 = nn.Linear(4 * C, C)
    def forward(s, x):
        q, k, v = s.qkv(s.ln1(x)).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.proj(y)
        return x + s.fc2(F.gelu(s.fc(s.ln2(x))))
class GPT(nn.Module):
    def __init__(s):
        super().__init__(); s.tok = nn.Embedding(V, C); s.pos = nn.Parameter(torch.randn(T, C) * 0.02)
        nn.init.normal_(s.tok.weight, 0, 0.02); s.blocks = nn.ModuleList([Block() for _ in range(L)]); s.lnf = nn.LayerNorm(C)
    def forward(s, x, y):
        h = s.tok(x) + s.pos
        for b in s.blocks: h = b(h)
        return F.cross_entropy((s.lnf(h) @ s.tok.weight.t()).float().view(-1, V), y.reshape(-1))
model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, beta2), weight_decay=wd, fused=True)
def batch(src):
    ix = torch.randint(0, len(src) - T - 1, (B,), device='cuda')
    off = ix[:, None] + torch.arange(T + 1, device='cuda')
    w = src[off]; return w[:, :-1], w[:, 1:]
t0 = time.time()
for step in range(1, steps + 1):
    for g in opt.param_groups: g['lr'] = lr * min(1.0, step / 200)
    x, y = batch(train)
    with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x, y)
    opt.zero_grad(set_to_none=True); loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step()
    if step % 50 == 0:
        msg = f"step {step}/{steps}  loss {loss.item():.4f}  {time.time() - t0:.1f}s  grad_norm {gn.item():.3f}"
        if step % 250 == 0:
            model.eval()
            with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
                vl = sum(model(*batch(val)).item() for _ in range(8)) / 8
            model.train(); msg += f"  val_loss {vl:.4f}"
        print(msg, flush=True)

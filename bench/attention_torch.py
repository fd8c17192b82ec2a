#!/usr/bin/env python3
"""Same-run PyTorch references for bench/attention_gpu (a script beside the bench, never a dependency).

Times PyTorch SDPA (dense causal) and FlexAttention on exactly tessera's block masks
(core/sparse/attention_layout.cpp's generators, rebuilt here), bf16, q, k, v, dO ~ N(0, 1),
median of CUDA-event timings after warm-up.

  python3 bench/attention_torch.py [--shapes b8h16t4096] [--head-dims 64] [--block 64]
                                   [--layouts dense,local,fixed,strided] [--repeats 20] [--json FILE]

Layouts (as attention_gpu): local window 8 blocks, strided stride 8 blocks, fixed stride 8 summary 1.
FlexAttention evaluates mask_mod per token inside partial blocks, so its result is exactly tessera's
mask (block layout and the causal mask inside diagonal blocks) whatever its own BLOCK_SIZE (--flex-block).
"""
import argparse
import json
import re
import sys


def layout_masks(kind, nb, heads):
    """[heads, nb, nb] bool block masks, as tessera's AttentionLayout generators build them."""
    import torch
    i = torch.arange(nb).view(nb, 1)
    j = torch.arange(nb).view(1, nb)
    causal = j <= i
    if kind == "dense":
        m = causal.expand(heads, nb, nb)
    elif kind == "local":
        m = (causal & (i - j < 8)).expand(heads, nb, nb)
    elif kind == "strided":
        m = (causal & ((i - j < 8) | ((i - j) % 8 == 0))).expand(heads, nb, nb)
    elif kind == "fixed":
        s, c = 8, 1
        patterns = s // c
        ms = []
        for h in range(heads):
            p = h % patterns
            r = j % s
            ms.append(causal & ((j // s == i // s) | ((r >= s - (p + 1) * c) & (r < s - p * c))))
        m = torch.stack([x.expand(nb, nb) for x in ms])
    else:
        raise ValueError(f"unknown layout {kind}")
    return m.contiguous()


def median_ms(fn, repeats):
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="b16h12t1024,b64h6t256,b8h16t4096,b2h16t16384")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--layouts", default="dense,local,fixed,strided")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--flex-block", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as e:
        print(f"attention_torch: PyTorch with FlexAttention is needed ({e})", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("attention_torch: no CUDA device", file=sys.stderr)
        return 1
    # One compiled FlexAttention per (shape, head dim, layout, grad or not): past dynamo's default
    # limit of 8 recompiles it would fall back to the eager (unfused, 100x slower) form.
    torch._dynamo.config.recompile_limit = 256
    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    print(f"{'what':44s} {'shape':18s} {'fwd ms':>9s} {'fwd+bwd ms':>11s}")
    for shape in a.shapes.split(","):
        mt = re.fullmatch(r"b(\d+)h(\d+)t(\d+)", shape)
        if not mt:
            print(f"attention_torch: --shapes: '{shape}' is not of the form b16h12t1024", file=sys.stderr)
            return 2
        B, H, T = map(int, mt.groups())
        for D in map(int, a.head_dims.split(",")):
            g = torch.Generator(device="cuda").manual_seed(7)
            q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
                           for _ in range(4))
            qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
            label = f"{shape} d{D}"

            def record(what, f, fb):
                rows.append({"what": what, "shape": label, "fwd_ms": f, "fwdbwd_ms": fb})
                print(f"{what:44s} {label:18s} {f:9.3f} {fb:11.3f}", flush=True)

            if "dense" in a.layouts.split(","):
                f = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.repeats)
                fb = median_ms(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=True).backward(do),
                               a.repeats)
                record("sdpa dense causal", f, fb)
            nb = T // a.block
            for kind in a.layouts.split(","):
                masks = layout_masks(kind, nb, H).cuda()
                bs = a.block
                # Only the fixed layout differs by head; the others build one head's block mask
                # (create_block_mask evaluates mask_mod over [heads, T, T]: 32 GB at T 16384).
                per_head = kind == "fixed"

                def mask_mod(b, h, qi, ki):
                    return masks[h if per_head else 0, qi // bs, ki // bs] & (ki <= qi)

                what = f"flex {kind} (tessera mask bs {bs}, flex block {a.flex_block})"
                try:
                    bm = create_block_mask(mask_mod, None, H if per_head else None, T, T, device="cuda",
                                           BLOCK_SIZE=a.flex_block)
                    f = median_ms(lambda: flex(q, k, v, block_mask=bm), a.repeats)
                    fb = median_ms(lambda: flex(qg, kg, vg, block_mask=bm).backward(do), a.repeats)
                except torch.OutOfMemoryError:
                    print(f"{what:44s} {label:18s} out of memory", flush=True)
                    bm = None
                    torch.cuda.empty_cache()
                    continue
                record(what, f, fb)
            del q, k, v, do, qg, kg, vg
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"bench": "attention_torch", "torch": torch.__version__, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

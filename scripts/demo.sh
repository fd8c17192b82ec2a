#!/usr/bin/env bash
# The demo: install what is missing, build Release, fetch tinyshakespeare, and train a small
# block-sparse LSTM language model on the CPU (about 3 minutes on 2 cores), then print a sample and
# where the checkpoint, the metrics and the loss plot are.
#
#   scripts/demo.sh                # run folder runs/demo (TESSERA_DEMO_OUT overrides)
#   scripts/demo.sh --steps 300    # extra flags go to train_lstm (see train_lstm --help)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh

build_dir=${TESSERA_BUILD_DIR:-build}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_EXAMPLES=ON "${launcher[@]}" >/dev/null
cmake --build "$build_dir" --target train_lstm -j "${TESSERA_JOBS:-$(nproc)}"

data=$(bash data/fetch.sh tinyshakespeare)
out=${TESSERA_DEMO_OUT:-runs/demo}
rm -rf "$out"

# Block-sparse LSTM: width 256 in blocks of 32 at 25% density, character level, compiled step.
"$build_dir/examples/train_lstm" --data "$data" --out "$out" --steps 1200 --eval-every 200 --ckpt-every 400 \
  --hidden 256 --block 32 --density 0.25 --batch 32 --seq 64 --lr 3e-3 "$@"

# The loss curve as an SVG (no plotting package needed).
python3 - "$out/metrics.jsonl" "$out/loss.svg" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
series = [("train_loss", "#1f77b4"), ("val_loss", "#d62728")]
pts = {k: [(r["step"], r[k]) for r in rows if k in r] for k, _ in series}
xs = [s for v in pts.values() for s, _ in v]; ys = [y for v in pts.values() for _, y in v]
W, H, M = 640, 400, 50
x0, x1, y0, y1 = min(xs), max(max(xs), min(xs) + 1), min(ys), max(max(ys), min(ys) + 1e-3)
X = lambda s: M + (s - x0) / (x1 - x0) * (W - 2 * M)
Y = lambda y: H - M - (y - y0) / (y1 - y0) * (H - 2 * M)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{M}" y1="{H-M}" x2="{W-M}" y2="{H-M}" stroke="black"/><line x1="{M}" y1="{M}" x2="{M}" y2="{H-M}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-15}" text-anchor="middle">step ({x0}..{x1})</text>',
       f'<text x="5" y="{M-10}">loss {y0:.2f}..{y1:.2f}</text>']
for i, (k, c) in enumerate(series):
    if pts[k]:
        svg.append(f'<polyline fill="none" stroke="{c}" points="' + " ".join(f"{X(s):.1f},{Y(y):.1f}" for s, y in pts[k]) + '"/>')
        svg.append(f'<text x="{W-M-80}" y="{M+15*i}" fill="{c}">{k}</text>')
open(sys.argv[2], "w").write("\n".join(svg + ["</svg>"]) + "\n")
EOF

echo
echo "--- sample after the last evaluation ($out/samples.txt) ---"
awk '/^=== step/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$out/samples.txt"
echo "checkpoint: $out/ckpt.h5   (resume: $build_dir/examples/train_lstm --resume $out/ckpt.h5 --out $out --steps 2000)"
echo "metrics:    $out/metrics.jsonl"
echo "loss plot:  $out/loss.svg"

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

# Built for this machine's CPU (TESSERA_MARCH=native: AVX2 / AVX-512 for Eigen's products and the
# kernels' loops; on a 2-core AVX-512 machine bench/train_cpu ran 1.4x faster for the LSTMs and
# 2.1-2.5x for the transformers than the portable default), in a folder of its own so that the
# test build (scripts/test.sh: build/, portable) is not reconfigured. TESSERA_MARCH= (empty)
# builds portable code.
build_dir=${TESSERA_BUILD_DIR:-build-demo}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_EXAMPLES=ON \
  -DTESSERA_MARCH="${TESSERA_MARCH-native}" "${launcher[@]}" >/dev/null
cmake --build "$build_dir" --target train_lstm -j "${TESSERA_JOBS:-$(nproc)}"

data=$(bash data/fetch.sh tinyshakespeare)
out=${TESSERA_DEMO_OUT:-runs/demo}
rm -rf "$out"

# Block-sparse LSTM: width 256 in blocks of 32 at 25% density, character level, compiled step.
"$build_dir/examples/train_lstm" --data "$data" --out "$out" --steps 1200 --eval-every 200 --ckpt-every 400 \
  --hidden 256 --block 32 --density 0.25 --batch 32 --seq 64 --lr 3e-3 "$@"


echo
echo "--- sample after the last evaluation ($out/samples.txt) ---"
awk '/^=== step/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$out/samples.txt"
echo "checkpoint: $out/ckpt.h5   (resume: $build_dir/examples/train_lstm --resume $out/ckpt.h5 --out $out --steps 2000)"
echo "metrics:    $out/metrics.jsonl"
echo "loss plot:  $out/loss.svg   (TensorBoard: tensorboard --logdir $out)"

#!/usr/bin/env bash
# device call (issue 16): the recurrence on wgmma (kernels/common/cuda/lstm_wgmma_{forward,backward,
# sparse_forward,sparse_backward}.cu, the default TESSERA_LSTM_WGMMA=auto) beside the production
# kernels (=0) and cuDNN, from the bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets
# gpu_tests lstm_step train_lstm). About 4 minutes:
#   1. the LSTM GPU tests (every kernel against the CPU, the layer under each choice);
#   2. lstm_step: dense H 1024 and the sparse H 4096 layer at 1/16, bs 32 (random and balanced):
#      the compiled layers (default choice) against cuDNN, the recurrence's µs per step on the
#      production and the wgmma kernels; then the other shapes (dense H 2048; sparse H 2048
#      at 1/4, H 8192 at 1/64, H 4096 at 1/4, H 8192 at 1/16: the layers, most of them step by step
#      since their W_h slices do not fit);
#   3. train_lstm's tokens/s (tinyshakespeare, B 64, T 256, 400 steps): dense H 1024 on cuDNN, on
#      the default and on the production kernels; the sparse H 4096 layer on the default and the
#      production kernels.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
timeout 180 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudnnLstmGpu.*:CudaModels.*' \
  >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $O/tests.log | head
echo "== lstm_step at $(( $(date +%s) - t0 )) s"
timeout 150 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 \
  --sparse 4096:0.0625:32,4096:0.0625:32:balanced --json $O/lstm_step.json >$O/lstm_step.log 2>&1
grep -E "graph|recurrence (fwd|bwd)|not run" $O/lstm_step.log | grep -v " vs " | cut -c1-130 | head -24
echo "== train_lstm tokens/s at $(( $(date +%s) - t0 )) s"
tl() {  # NAME ENV... -- FLAGS...: one short run, its last logged rate
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 90 dist/run train_lstm --device cuda --dtype bf16 --batch 64 --seq 256 --steps 400 \
    --data dist/data/input.txt --eval-every 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --out /tmp/tl_$name \
    "$@" >$O/tl_$name.log 2>&1
  echo "$name rc $?: $(grep -E '^step 400/' $O/tl_$name.log | grep -oE '[0-9]+ tok/s|loss [0-9.]+' | tr '\n' ' ')"
}
tl cudnn_h1024 X=1 -- --hidden 1024 --block 0 --cudnn
tl tessera_h1024 X=1 -- --hidden 1024 --block 0
tl production_h1024 TESSERA_LSTM_WGMMA=0 -- --hidden 1024 --block 0
tl sparse_h4096 X=1 -- --hidden 4096 --block 32 --density 0.0625
tl sparse_production_h4096 TESSERA_LSTM_WGMMA=0 -- --hidden 4096 --block 32 --density 0.0625
cat $O/tl_*.log > $O/train_lstm.log; rm -f $O/tl_*.log
echo "== lstm_step, the issue's other shapes, at $(( $(date +%s) - t0 )) s"
timeout 200 dist/run lstm_step --hidden 2048 --dtypes bf16 --repeats 3 --warmup 1 \
  --sparse 2048:0.25:32,8192:0.015625:32,4096:0.25:32,8192:0.0625:32 --json $O/lstm_step_more.json \
  >$O/lstm_step_more.log 2>&1
echo "rc $?"; grep -E "graph" $O/lstm_step_more.log | grep -v " vs " | cut -c1-130 | head -16
echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# device call (issue 16): the recurrence on wgmma (kernels/common/cuda/lstm_wgmma_{forward,backward,
# sparse_forward,sparse_backward}.cu) and the step floor (lstm_wgmma_floor.cu) beside the production kernels,
# from the bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets gpu_tests lstm_step
# train_lstm). About 3 minutes:
#   1. the LSTM GPU tests: WgmmaKernelsMatchTheCpu (both dense wgmma kernels against the CPU,
#      clusters of 1, 2, 4, and each beside the other direction's production kernel),
#      WgmmaSparseKernelsMatchTheCpu (the block-sparse ones, likewise), the layer test (default
#      choice, production only, wgmma only), WgmmaStepFloorComputesItsSteps (the lab; a hang in
#      any would be the split grid barrier or the multicast ring: the timeout ends it), the
#      production kernels' tests and the LSTM layer tests;
#   2. lstm_step on dense H 1024 and the sparse H 4096 layer (random, and balanced: every block
#      column as full as the mean, no busiest group): the compiled layers, the production
#      recurrence's µs per step, rows "recurrence fwd / bwd, wgmma, clusters of N", and the floor's
#      rows "step floor: wgmma forward / backward" with and without multicast (µs per step, against
#      "recurrence fwd / bwd" and the bare grid barrier);
#   3. lstm_step on dense H 1024 and sparse H 4096 again with TESSERA_LSTM_WGMMA=auto: the
#      compiled layers (tessera graph) with each direction on its measured winner, against the
#      production kernels (the default, step 2) and cuDNN;
#   4. train_lstm's tokens/s: dense H 1024 on cuDNN, on tessera's production kernels and with
#      TESSERA_LSTM_WGMMA=auto, and the sparse H 4096 layer the same two ways (the note
#      wants the trainer's rates).
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
timeout 180 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudnnLstmGpu.*:CudaModels.*' \
  >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $O/tests.log | head
echo "== lstm_step at $(( $(date +%s) - t0 )) s"
timeout 200 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 \
  --sparse 4096:0.0625:32,4096:0.0625:32:balanced \
  --json $O/lstm_step.json >$O/lstm_step.log 2>&1
grep -E "graph|recurrence|floor|not run" $O/lstm_step.log | cut -c1-150 | head -40
echo "== lstm_step, H1024 and sparse H4096, TESSERA_LSTM_WGMMA=auto, at $(( $(date +%s) - t0 )) s"
TESSERA_LSTM_WGMMA=auto timeout 150 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 \
  --sparse 4096:0.0625:32 --json $O/lstm_step_auto.json >$O/lstm_step_auto.log 2>&1
grep -E "graph|recurrence" $O/lstm_step_auto.log | cut -c1-150 | head -30
echo "== train_lstm tokens/s (tinyshakespeare, bf16, B 64, T 256, 400 steps) at $(( $(date +%s) - t0 )) s"
tl() {  # NAME ENV... -- FLAGS...: one short run, its last logged rate
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 120 dist/run train_lstm --device cuda --dtype bf16 --batch 64 --seq 256 --steps 400 \
    --data dist/data/input.txt --eval-every 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --out /tmp/tl_$name \
    "$@" >$O/tl_$name.log 2>&1
  echo "$name rc $?: $(grep -E '^step 400/' $O/tl_$name.log | grep -oE '[0-9]+ tok/s')"
}
tl cudnn_h1024 X=1 -- --hidden 1024 --block 0 --cudnn
tl tessera_h1024 X=1 -- --hidden 1024 --block 0
tl tessera_auto_h1024 TESSERA_LSTM_WGMMA=auto -- --hidden 1024 --block 0
tl sparse_h4096 X=1 -- --hidden 4096 --block 32 --density 0.0625
tl sparse_auto_h4096 TESSERA_LSTM_WGMMA=auto -- --hidden 4096 --block 32 --density 0.0625
cat $O/tl_*.log > $O/train_lstm.log; rm -f $O/tl_*.log
echo "all done at $(( $(date +%s) - t0 )) s"

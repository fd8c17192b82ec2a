#!/usr/bin/env bash
# device call (issue 16): the LSTM paths as they run by default after the lab's sixth and seventh
# runs (the sparse pairs where needed, the backward's gate boxes, the W-streamed dense kernels where
# the resident ones do not fit, the forward bsmm's twin columns of the gate layouts), from the
# bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets gpu_tests lstm_step train_lstm),
# about 4 minutes:
#   1. every LSTM, bsmm and block-sparse convolution GPU test;
#   2. lstm_step, bf16, graph fwd+bwd at B 64, T 256: the table (dense H 1024 and 2048
#      against cuDNN; sparse H 2048 at 1/4, H 4096 at 1/16 (random and balanced) and 1/4, H 8192 at
#      1/64 and 1/16), --json $OUT/lstm_step.json;
#   3. train_lstm's tokens/s (tinyshakespeare, B 64, T 256, 400 steps): dense H 1024 (cuDNN and
#      tessera), sparse H 4096 at 1/16 and H 8192 at 1/16;
#   4. issue 19: bsconv_gpu at density 0.25, bs 32 and 64, both shapes (targets gpu_tests lstm_step
#      bsconv_gpu train_lstm in the bundle), about a minute more.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*:CudaBsConv.*'
timeout 240 dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $O/tests.log | head -8
sparse=2048:0.25:32,4096:0.0625:32,4096:0.0625:32:balanced,4096:0.25:32,8192:0.015625:32,8192:0.0625:32
timeout 200 dist/run lstm_step --hidden 1024,2048 --dtypes bf16 --repeats 3 --warmup 1 --sparse $sparse \
  --json $O/lstm_step.json >$O/lstm_step.log 2>&1
echo "lstm_step rc $? at $(( $(date +%s) - t0 )) s"
grep -E "graph" $O/lstm_step.log | grep -v " vs \|step-wise\|floor" | cut -c1-110
train() {  # NAME ARGS...: train_lstm's tokens/s at step 400
  local name=$1; shift
  timeout 45 dist/run train_lstm --device cuda --dtype bf16 --batch 64 --seq 256 --steps 400 \
    --data dist/data/input.txt --eval-every 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --out /tmp/tl "$@" \
    >$O/train_$name.log 2>&1
  local rc=$? at400
  at400=$(grep -E '^step 400/' $O/train_$name.log | grep -oE '[0-9]+ tok/s|loss [0-9.]+' | tr '\n' ' ')
  echo "train $name rc $rc: $at400"
}
[ $(( $(date +%s) - t0 )) -lt 250 ] && train dense1024 --hidden 1024 --block 0
[ $(( $(date +%s) - t0 )) -lt 280 ] && train cudnn1024 --hidden 1024 --block 0 --cudnn
[ $(( $(date +%s) - t0 )) -lt 300 ] && train sparse4096 --hidden 4096 --block 32 --density 0.0625
[ $(( $(date +%s) - t0 )) -lt 320 ] && train sparse8192_16 --hidden 8192 --block 32 --density 0.0625
# issue 19's table: the convolution passes at density 0.25, bs 32 and 64, against cuDNN in the same run
[ $(( $(date +%s) - t0 )) -lt 420 ] && timeout 90 dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 \
  --block-sizes 32,64 --densities 0.25 --repeats 10 --json $O/bsconv_gpu.json >$O/bsconv.log 2>&1 &&
  grep -E "fwd|dgrad|wgrad" $O/bsconv.log | cut -c1-110
echo "all done at $(( $(date +%s) - t0 )) s"

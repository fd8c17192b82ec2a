#!/usr/bin/env bash
# device call (issue 16): the block-sparse recurrence with two groups / block rows a block
# (lstm_wgmma_sparse_{forward,backward}.cu, kGroups / kRows = 2; lstm_wgmma_ring.cuh's sparse_grid),
# from the bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets gpu_tests lstm_step train_lstm),
# about 4 minutes:
#   1. the sparse wgmma recurrence tests, the pairs' among them (LstmRecurrenceGpu.WgmmaSparse*),
#      and every other LSTM GPU test;
#   2. lstm_step on sparse H 8192 at 1/64, bs 32 (now paired, before on the production kernels)
#      against cuDNN's dense H 1024 (the target: ≤ 1.5× it), and H 4096 at 1/16 (one a block,
#      unchanged; random and balanced) for the same run's reference;
#   3. train_lstm's tokens/s (tinyshakespeare, B 64, T 256, 400 steps) on both sparse layers.
set -uo pipefail
O=$OUT; t0=$(date +%s)
export TESSERA_LSTM_SPARSE_PAIRS=auto  # (off by default until this call has passed)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"
cat dist/BUILD
timeout 200 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudnnLstmGpu.*:CudaModels.*' \
  >$O/lstm_tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/lstm_tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $O/lstm_tests.log | head
grep -E "H 8192" $O/lstm_tests.log | head -4
echo "== lstm_step at $(( $(date +%s) - t0 )) s"
timeout 200 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 \
  --sparse 8192:0.015625:32,4096:0.0625:32,4096:0.0625:32:balanced --json $O/lstm_step_pairs.json >$O/lstm_step_pairs.log 2>&1
echo "rc $?"; grep -E "graph|recurrence (fwd|bwd)|not run" $O/lstm_step_pairs.log | grep -v " vs " | cut -c1-130 | head -24
echo "== train_lstm tokens/s at $(( $(date +%s) - t0 )) s"
for shape in "4096 0.0625" "8192 0.015625"; do
  set -- $shape
  timeout 60 dist/run train_lstm --device cuda --dtype bf16 --batch 64 --seq 256 --steps 400 --data dist/data/input.txt \
    --eval-every 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --out /tmp/tl_$1 --hidden $1 --block 32 --density $2 \
    >$O/tl_$1.log 2>&1
  echo "H $1 d $2 rc $?: $(grep -E '^step 400/' $O/tl_$1.log | grep -oE '[0-9]+ tok/s|loss [0-9.]+' | tr '\n' ' ')"
done
echo "all done at $(( $(date +%s) - t0 )) s"

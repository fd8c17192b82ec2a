#!/usr/bin/env bash
# device call (issue 16): the block-sparse recurrence with two groups / block rows a block
# (lstm_wgmma_sparse_{forward,backward}.cu, kGroups / kRows = 2; lstm_wgmma_ring.cuh's sparse_grid;
# TESSERA_LSTM_SPARSE_PAIRS=auto), the backward's gate boxes and the streamed-W dense kernels
# (TESSERA_LSTM_WGMMA_STREAMED=1), from the bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another;
# targets gpu_tests lstm_step train_lstm), about a minute, the most useful first. The seventh run
# (docs/lstm_gpu.md) ran it with a 16-stage ring beside the gate boxes (deleted since: no gain)
# and before these became the defaults:
#   1. the LSTM GPU tests (the pairs', the gate boxes' and the streamed kernels' among them) and the
#      bsmm column pairs' and gate-run dW's (the gate layouts' twin columns among them);
#   2. lstm_step on sparse H 8192 at 1/64, bs 32 (paired; before on the production kernels) against
#      cuDNN's dense H 1024 (the target: ≤ 1.5× it), and H 4096 at 1/16 (random) as the reference;
#   3. lstm_step on H 4096 at 1/16 (random and balanced) with the backward's gate boxes
#      (TESSERA_LSTM_SPARSE_GATE_BOXES=1: one copy per entry for four gates);
#   4. lstm_step on dense H 2048 with W partly streamed in both directions
#      (TESSERA_LSTM_WGMMA_STREAMED=1, lstm_wgmma_{forward,backward}_streamed.cu; the recurrence rows
#      give their µs a step beside the production kernels', the graph row the layer against cuDNN's);
#   5. lstm_step --profile of the sparse H 4096 layer (1/16) with the forward bsmm's twin-column
#      pairs of the gate layouts (the rule's choice) and without (TESSERA_BSMM_PAIRS=0; the seventh
#      run also timed a split of N in the gate-run dW here, deleted since);
#   6. where time is left, train_lstm's tokens/s (tinyshakespeare, B 64, T 256, 400 steps) on
#      sparse H 8192 at 1/64.
set -uo pipefail
O=$OUT; t0=$(date +%s)
export TESSERA_LSTM_SPARSE_PAIRS=auto
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"
cat dist/BUILD
filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*Pair*'
filter+=':CudaBsmmTensorCores.GateLayout*'
timeout 240 dist/run gpu_tests --gtest_filter="$filter" >$O/lstm_tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/lstm_tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $O/lstm_tests.log | head -5
grep -E "H 8192" $O/lstm_tests.log | head -2 | cut -c1-160
step() {  # NAME HIDDEN SPARSE [ENV...]: one lstm_step run, its graph and recurrence rows
  local name=$1 hidden=$2 sparse=$3; shift 3
  env "$@" timeout 60 dist/run lstm_step --hidden $hidden --dtypes bf16 --repeats 3 --warmup 1 --sparse "$sparse" \
    --json $O/step_$name.json >$O/step_$name.log 2>&1
  echo "== $name rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "graph|recurrence (fwd|bwd)" $O/step_$name.log | grep -v " vs \|step-wise" | cut -c1-120
}
step pairs 1024 8192:0.015625:32,4096:0.0625:32,4096:0.0625:32:balanced X=1
profile() {  # NAME [ENV...]: lstm_step --profile of the sparse H 4096 layer, its bsmm nodes
  local name=$1; shift
  env "$@" timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 --sparse 4096:0.0625:32 \
    --profile >$O/profile_$name.log 2>&1
  echo "== profile $name rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "bsmm|^tessera sparse graph" $O/profile_$name.log | grep -v " vs " | cut -c1-120
}
profile twins X=1
profile before TESSERA_BSMM_PAIRS=0
step streamed 2048 none TESSERA_LSTM_WGMMA_STREAMED=1
step gateboxes 0 4096:0.0625:32,4096:0.0625:32:balanced TESSERA_LSTM_SPARSE_GATE_BOXES=1
[ $(( $(date +%s) - t0 )) -lt 420 ] && timeout 45 dist/run train_lstm --device cuda --dtype bf16 --batch 64 --seq 256 \
  --steps 400 --data dist/data/input.txt \
  --eval-every 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --out /tmp/tl --hidden 8192 --block 32 \
  --density 0.015625 >$O/tl_8192.log 2>&1
echo "train H 8192 rc $?: $(grep -E '^step 400/' $O/tl_8192.log | grep -oE '[0-9]+ tok/s|loss [0-9.]+' | tr '\n' ' ')"
echo "all done at $(( $(date +%s) - t0 )) s"

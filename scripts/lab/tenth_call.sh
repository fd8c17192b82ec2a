#!/usr/bin/env bash
# The record of the tenth run (docs/lstm_gpu.md, "Tenth run"; H100, 2026-12-07, 102 s). Since then
# the two lab forms it timed are deleted, so their switches (TESSERA_BSCONV_HALO_GROUP,
# TESSERA_BSMM_DW_CHAIN) change nothing: parts 2 and 3 now time the defaults twice.
# device call (issues 16 and 19), one machine session with little device time: the parts in order of
# need, each skipped once LIMIT seconds (default 560) have passed. From the bundle build-gpu/lab2.tar.xz
# (carry it; BUNDLE= another; targets gpu_tests lstm_step bsconv_gpu train_lstm):
#   1. every LSTM, bsmm and block-sparse convolution GPU test under the defaults (chain mode's case
#      of bsmm_dw's chunks among them);
#   2. bsconv_gpu at density 0.25, bs 32 and 64, both shapes; then bs 64 in the halo kernel's group
#      mode (TESSERA_BSCONV_HALO_GROUP=3) against it;
#   3. the gate dW's chunks in chain mode (TESSERA_BSMM_DW_CHAIN=1), graph step and profile: sparse
#      H 8192 at 1/16 against the chunks summed by a second kernel (the default); sparse H 4096 at
#      1/16 (random) in 2 and 4 chunks against 1 (the default);
#   4. lstm_step's issue-16 table (lstm_defaults_call.sh's command), --json $OUT/lstm_step.json;
#   5. train_lstm tokens/s (dense H 1024 tessera / cuDNN, sparse H 4096 at 1/16).
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-560}
left() { [ $(( $(date +%s) - t0 )) -lt $(( LIMIT - ${1:-0} )) ]; }
B=${BUNDLE:-build-gpu/lab2.tar.xz}; rm -rf dist; tar xJf "$B"; cat dist/BUILD
filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*:CudaBsConv.*'
timeout $(( LIMIT / 2 < 240 ? LIMIT / 2 : 240 )) dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $O/tests.log | head -8
conv() {  # NAME BLOCK-SIZES ENV...: bsconv_gpu at density 0.25 on both shapes
  local name=$1 bs=$2; shift 2
  env "$@" timeout 80 dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 --block-sizes $bs --densities 0.25 \
    --repeats 8 --json $O/bsconv_$name.json >$O/bsconv_$name.log 2>&1
  echo "bsconv $name rc $?"; grep -E "fwd|dgrad|wgrad" $O/bsconv_$name.log | sed "s/^/$name: /" | cut -c1-120
}
left 90 && conv default 32,64 X=1
left 60 && conv group3 64 TESSERA_BSCONV_HALO_GROUP=3
chain() {  # NAME LAYER ENV...: a sparse layer's graph step and its profile
  local name=$1 layer=$2; shift 2
  env "$@" timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 --sparse $layer \
    --profile >$O/chain_$name.log 2>&1
  echo "$layer $name rc $?: $(grep -E 'tessera sparse graph' $O/chain_$name.log | head -1 | cut -c1-100)"
  grep -E "profile.*(bsmm_dw|\(sum\))" $O/chain_$name.log | cut -c1-110
}
left 45 && chain h8192sums 8192:0.0625:32 X=1
left 45 && chain h8192chain 8192:0.0625:32 TESSERA_BSMM_DW_CHAIN=1
# the random H 4096 layer's ~180 gate runs leave the dW's second wave mostly idle: chunks of n in
# chain mode make more, shorter items (its sums, 16 MB, fit L2)
left 40 && chain h4096one 4096:0.0625:32 X=1
left 40 && chain h4096chain2 4096:0.0625:32 TESSERA_BSMM_DW_CHAIN=1 TESSERA_BSMM_DW_CHUNKS=2
left 40 && chain h4096chain4 4096:0.0625:32 TESSERA_BSMM_DW_CHAIN=1 TESSERA_BSMM_DW_CHUNKS=4
sparse=2048:0.25:32,4096:0.0625:32,4096:0.0625:32:balanced,4096:0.25:32,8192:0.015625:32,8192:0.0625:32
left 150 && { timeout 200 dist/run lstm_step --hidden 1024,2048 --dtypes bf16 --repeats 3 --warmup 1 \
  --sparse $sparse --json $O/lstm_step.json >$O/lstm_step.log 2>&1
  echo "lstm_step rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "graph" $O/lstm_step.log | grep -v " vs \|step-wise\|floor" | cut -c1-110; }
train() {  # NAME ARGS...: train_lstm's tokens/s at step 400
  local name=$1; shift
  timeout 45 dist/run train_lstm --device cuda --dtype bf16 --batch 64 --seq 256 --steps 400 \
    --data dist/data/input.txt --eval-every 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --out /tmp/tl "$@" \
    >$O/train_$name.log 2>&1
  echo "train $name rc $?: $(grep -E '^step 400/' $O/train_$name.log | grep -oE '[0-9]+ tok/s|loss [0-9.]+' | tr '\n' ' ')"
}
left 45 && train dense1024 --hidden 1024 --block 0
left 45 && train cudnn1024 --hidden 1024 --block 0 --cudnn
left 45 && train sparse4096 --hidden 4096 --block 32 --density 0.0625
echo "all done at $(( $(date +%s) - t0 )) s"

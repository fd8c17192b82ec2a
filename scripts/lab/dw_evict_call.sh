#!/usr/bin/env bash
# device call (issue 16): the gate-run dW kernel copying dY's strips with an L2 evict-first policy
# (bsmm_sm90_gate_gradient.cu; TESSERA_BSMM_DW_EVICT_FIRST=0 without), from the bundle
# build-gpu/lab.tar.xz (carry it), about a minute: its GPU test, the LSTM layer and wgmma recurrence
# tests (dW_h now as two products, y read in place: lstm_recurrence.cpp), then
# lstm_step --profile of sparse H 4096 at 1/16 (random) and H 8192 at 1/64, each with and without.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"
cat dist/BUILD
timeout 120 dist/run gpu_tests --gtest_filter='CudaBsmmTensorCores.GateLayout*:LstmLayerGpu.*:CudaModels.*:LstmRecurrenceGpu.Wgmma*' \
  >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A 3 $O/tests.log | head -8
for s in 4096:0.0625:32 8192:0.015625:32; do
  for ef in 1 0; do
    TESSERA_BSMM_DW_EVICT_FIRST=$ef timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 \
      --sparse $s --profile >$O/profile.log 2>&1
    echo "== $s evict-first $ef rc $?: $(grep -E '^  bsmm_dw ' $O/profile.log | cut -c1-60)"
    grep -E "^tessera sparse graph" $O/profile.log | cut -c1-90
  done
done
rm -f $O/profile.log
echo "all done at $(( $(date +%s) - t0 )) s"

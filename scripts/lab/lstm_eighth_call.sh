#!/usr/bin/env bash
# device call (issue 16): what was built after the seventh run, from the bundle build-gpu/lab.tar.xz
# (carry it; BUNDLE= another; targets gpu_tests lstm_step), about 2 minutes:
#   1. the GPU tests of the gate-run dW, the LSTM layers and the wgmma recurrence (dW_h now as two
#      products reading y in place: lstm_recurrence.cpp; the backward's gate boxes with two rows a
#      block: WgmmaSparseGateBoxPairsMatchTheCpu);
#   2. lstm_step --profile of sparse H 4096 at 1/16 (random) and H 8192 at 1/64 with the gate-run
#      dW's evict-first copies of dY (bsmm_sm90_gate_gradient.cu, the default) and without
#      (TESSERA_BSMM_DW_EVICT_FIRST=0);
#   3. lstm_step on H 8192 at 1/64 with gate boxes in the paired backward
#      (TESSERA_LSTM_SPARSE_GATE_BOXES=pairs) and without (the default), against cuDNN's dense H 1024;
#   4. lstm_step --profile of sparse H 8192 at 1/16 and of dense H 2048;
#   0. first: the K-split streamed backward's test (lstm_wgmma_backward_split.cu) and dense H 2048
#      with it (TESSERA_LSTM_STREAMED_SPLIT=1) and without (as run on 2026-12-06; the split kernel
#      has since replaced the unsplit one, and the switch and the test are gone); the sparse streamed forms' test
#      and sparse H 8192 at 1/16 with it (TESSERA_LSTM_SPARSE_STREAMED=1) and without.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
filter='CudaBsmmTensorCores.GateLayout*:LstmLayerGpu.*:CudaModels.*:LstmRecurrenceGpu.Wgmma*'
filter="$filter-*WgmmaSplit*:*WgmmaSparseStreamed*"  # (those two run first, below)
timeout 120 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.WgmmaSplit*' >$O/split_test.log 2>&1
echo "split test rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/split_test.log | tr '\n' ' ')"
grep -E "Failure|Error|error" -A 3 $O/split_test.log | head -12
timeout 150 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.WgmmaSparseStreamed*' >$O/streamed_test.log 2>&1
echo "sparse streamed test rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/streamed_test.log | tr '\n' ' ')"
grep -E "Failure|Error|error" -A 3 $O/streamed_test.log | head -12
for st in 1 0; do
  TESSERA_LSTM_SPARSE_STREAMED=$st timeout 90 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 \
    --sparse 8192:0.0625:32 >$O/sparse_streamed_$st.log 2>&1
  echo "== sparse H 8192 1/16, streamed $st rc $?"
  grep -E "^tessera sparse graph|recurrence (fwd|bwd)" $O/sparse_streamed_$st.log | cut -c1-110
done
for sp in 1 0; do
  TESSERA_LSTM_STREAMED_SPLIT=$sp timeout 60 dist/run lstm_step --hidden 2048 --dtypes bf16 --repeats 3 --warmup 1 \
    >$O/split_$sp.log 2>&1
  echo "== dense H 2048, K split $sp rc $?"
  grep -E "^(tessera|cudnn) graph|recurrence (fwd|bwd)" $O/split_$sp.log | cut -c1-110
done
timeout 180 dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A 3 $O/tests.log | head -8
for s in 4096:0.0625:32 8192:0.015625:32; do
  for ef in 1 0; do
    TESSERA_BSMM_DW_EVICT_FIRST=$ef timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 \
      --sparse $s --profile >$O/profile_${s%%:*}_$ef.log 2>&1
    echo "== $s evict-first $ef rc $?: $(grep -E '^  bsmm_dw ' $O/profile_${s%%:*}_$ef.log | cut -c1-60)"
    grep -E "^tessera sparse graph" $O/profile_${s%%:*}_$ef.log | cut -c1-90
  done
done
for boxes in 1 0; do  # (run on 2026-12-06 as `pairs 1`: `pairs` has since become the default, 1)
  TESSERA_LSTM_SPARSE_GATE_BOXES=$boxes timeout 60 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 3 \
    --warmup 1 --sparse 8192:0.015625:32 >$O/step_boxes_$boxes.log 2>&1
  echo "== H 8192 1/64, gate boxes $boxes rc $?"
  grep -E "^(tessera|cudnn) (sparse )?graph|recurrence (fwd|bwd), wgmma bf16 +B64 T256 H8192" $O/step_boxes_$boxes.log |
    cut -c1-100
done
# 4. where sparse H 8192 at 1/16 (W_h 33.5 MB: production kernels, W partly from L2) spends its step
timeout 90 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 --sparse 8192:0.0625:32 --profile \
  >$O/profile_8192_16.log 2>&1
echo "== H 8192 1/16 profile rc $?"
grep -E "^tessera sparse graph|^profile tessera" $O/profile_8192_16.log | cut -c1-120 | head -14
timeout 90 dist/run lstm_step --hidden 2048 --dtypes bf16 --repeats 2 --warmup 1 --profile >$O/profile_d2048.log 2>&1
echo "== dense H 2048 profile rc $?"
grep -E "^(tessera|cudnn) graph|^profile tessera" $O/profile_d2048.log | cut -c1-120 | head -24
echo "all done at $(( $(date +%s) - t0 )) s"

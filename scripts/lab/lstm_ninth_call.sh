#!/usr/bin/env bash
# A record: it ran once (2026-12-07, the "Ninth run" of docs/lstm_gpu.md), before its lab choices
# became defaults or were deleted; TESSERA_LSTM_SPARSE_GATE_BOXES=streamed is now an error and
# TESSERA_BSCONV_HALO_DEPTH is no longer read. scripts/lab/lstm_defaults_call.sh times the defaults.
# device call (issues 16 and 19): what was built after the eighth run, from the bundle
# build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets gpu_tests lstm_step bsconv_gpu), the
# timings first and the tests of what they time in what is left of LIMIT seconds (default 570):
#   1. issue 19: bsconv_gpu's fwd and dgrad (N 64 × 56 × 56 × 256 and 32 × 28 × 28 × 512, density
#      0.25, bs 32 and 64) with the halo kernel's entry mode (TESSERA_BSCONV_HALO_ENTRY=1: one
#      barrier wait and release per list entry, not per tap) and without; then bs 32 with the tall
#      tiles' three A buffers (TESSERA_BSCONV_HALO_DEPTH=3) in entry mode;
#   2. sparse H 8192 at 1/16 with the backward's gate boxes in the streamed form
#      (TESSERA_LSTM_SPARSE_GATE_BOXES=streamed: a mask entry's four W blocks beside its four boxes)
#      and without (1, the default: 32.9 µs a backward step on the H100), against cuDNN's dense H 2048;
#      if its test passes and it is faster, make it the behaviour of 1 (sparse_gate_boxes_streamed);
#   3. the gate dW with n cut into chunks (TESSERA_BSMM_DW_CHUNKS=1, 4, 16; lab), profiled on sparse
#      H 8192 at 1/16 (the `bsmm_dw` row: 6.08 ms with 1 on the H100);
#   4. the tests: CudaBsConv.*, LstmRecurrenceGpu.WgmmaSparseStreamed*, CudaBsmmTensorCores.GateLayout*;
#      with TESTS_ONLY=1 only tests, every LSTM, bsmm and block-sparse convolution GPU test.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
shapes=n64h56c256,n32h28c512; [ "${QUICK:-0}" = 0 ] || shapes=n64h56c256  # QUICK=1: one shape, no dW chunks
if [ "${TESTS_ONLY:-0}" = 0 ]; then
for entry in 0 1; do  # issue 19: the halo kernel's entry mode (a list entry's taps under one barrier)
  TESSERA_BSCONV_HALO_ENTRY=$entry timeout 70 dist/run bsconv_gpu --shapes $shapes \
    --block-sizes 32,64 --densities 0.25 --repeats 10 >$O/conv_$entry.log 2>&1
  echo "== bsconv, halo entry mode $entry rc $?"; grep -E "fwd|dgrad" $O/conv_$entry.log | cut -c1-110
done
for depth in 3; do for entry in 1; do  # tall tiles' three A buffers (bs 16, 32)
  TESSERA_BSCONV_HALO_DEPTH=$depth TESSERA_BSCONV_HALO_ENTRY=$entry timeout 60 dist/run bsconv_gpu \
    --shapes $shapes --block-sizes 32 --densities 0.25 --repeats 10 >$O/conv_d$entry.log 2>&1
  echo "== bsconv, A depth $depth, entry mode $entry rc $?"; grep -E "fwd|dgrad" $O/conv_d$entry.log | cut -c1-110
done; done
for boxes in streamed 1; do
  TESSERA_LSTM_SPARSE_GATE_BOXES=$boxes timeout 60 dist/run lstm_step --hidden 2048 --dtypes bf16 --repeats 3 \
    --warmup 1 --sparse 8192:0.0625:32 >$O/step_$boxes.log 2>&1
  echo "== sparse H 8192 1/16, gate boxes $boxes rc $?"
  grep -E "^(tessera|cudnn) (sparse )?graph|wgmma bf16 +B64 T256 H8192" $O/step_$boxes.log | cut -c1-100
  grep -E "^profile tessera sparse graph bf16: [a-z_]+ \(" $O/step_$boxes.log | cut -c1-100 | head -5
done
[ "${QUICK:-0}" = 0 ] && for layer in 8192:0.0625:32; do
  for chunks in 1 4 16; do
    TESSERA_BSMM_DW_CHUNKS=$chunks timeout 45 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 \
      --sparse $layer --profile >$O/chunks_${layer%%:*}_$chunks.log 2>&1
    echo "== $layer, dW chunks $chunks rc $?: $(grep -E '^profile tessera sparse graph bf16: bsmm_dw ' \
      $O/chunks_${layer%%:*}_$chunks.log | grep -oE ' [0-9]+\.[0-9]+ ' | head -1) ms dW;" \
      "$(grep -E '^tessera sparse graph' $O/chunks_${layer%%:*}_$chunks.log | grep -oE '[0-9]+\.[0-9]+ ms')"
  done
done
fi
left=$(( ${LIMIT:-570} - ($(date +%s) - t0) ))  # the tests last, in what is left of the call (or a call of their own: TESTS_ONLY=1)
filter='CudaBsConv.*:LstmRecurrenceGpu.WgmmaSparseStreamed*:CudaBsmmTensorCores.GateLayout*'
[ "${TESTS_ONLY:-0}" = 0 ] || filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*:CudaBsConv.*'
timeout $left dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $O/tests.log | head -8
grep -E "^\[       OK|^\[  FAILED" $O/tests.log | tail -3
exit 0

#!/usr/bin/env bash
# The ring switches, back for ring_again_call.sh, were deleted on 2026-12-07 after that A/B (docs/lstm_gpu.md).
# A RECORD (run once, 2026-12-07; TESSERA_LSTM_SPARSE_W_EVICT_LAST and the ring switches are deleted,
# and the streamed stores were taken out: docs/lstm_gpu.md). device call (issue 16): at sparse
# H 8192 1/16 (both recurrences in their streamed forms, W_h partly streamed from L2 each step),
# L2 policies against the bundle before them, then the streamed forms' ring depths. First every
# LSTM, bsmm and convolution GPU test (FILTER=). Then lstm_step's graph step and recurrence rows,
# ROUNDS (2) rounds interleaved:
# - base: BASE= (an lstm_step built before the policies, xz; default build-gpu/base_lstm_step.xz);
# - streamed stores: this bundle (the forward's gx reads and saved gates and cells as streamed data);
# - W evict-last: the same with TESSERA_LSTM_SPARSE_W_EVICT_LAST=1 (the streamed W copies evict-last);
# - rings (fwd:bwd) 12:6, 16:8, 8:6, 8:8 (TESSERA_LSTM_SPARSE_STREAM_RING /
#   TESSERA_LSTM_SPARSE_BWD_STREAM_RING; 8:4 is the default, the row above).
# From the bundle (BUNDLE=, default build-gpu/lab3.tar.xz; targets gpu_tests lstm_step), about 6 minutes.
set -uo pipefail
O=$OUT; t0=$(date +%s)
FILTER=${FILTER:-'LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*:CudaBsConv.*'}
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab3.tar.xz}"; cat dist/BUILD
xz -dc "${BASE:-build-gpu/base_lstm_step.xz}" >dist/bin/lstm_step_base && chmod +x dist/bin/lstm_step_base
timeout ${TEST_LIMIT:-240} dist/run gpu_tests --gtest_filter="$FILTER" >$O/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A4 $O/tests.log | head -12
. scripts/lab/lstm_step_row.sh  # row NAME PROGRAM [VAR=VALUE …]
for r in $(seq ${ROUNDS:-2}); do
  echo "round $r at $(( $(date +%s) - t0 )) s"
  row "base (before the policies)" lstm_step_base
  row "streamed stores" lstm_step
  row "streamed stores + W evict-last" lstm_step TESSERA_LSTM_SPARSE_W_EVICT_LAST=1
  for rings in 12:6 16:8 8:6 8:8; do
    row "rings $rings" lstm_step TESSERA_LSTM_SPARSE_STREAM_RING=${rings%:*} \
      TESSERA_LSTM_SPARSE_BWD_STREAM_RING=${rings#*:}
  done
done
cp $O/c.log $O/last_lstm_step.log
echo "all done at $(( $(date +%s) - t0 )) s"

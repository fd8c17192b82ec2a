#!/usr/bin/env bash
# device call (issue 16): the block-sparse streamed recurrence kernels' ring depth, forward
# (TESSERA_LSTM_SPARSE_STREAM_RING = 8, the default, 12 or 16 stages) and backward
# (TESSERA_LSTM_SPARSE_BWD_STREAM_RING = 4, the default, 6 or 8), fewer W units resident for the
# deeper rings. ncu of the forward at sparse H 8192 1/16 put 49% of the warps' samples on waits for
# a stage's box. First the sparse wgmma recurrence GPU tests (FILTER=; the streamed forms, the new
# ring cases among them), then lstm_step's graph step and recurrence rows at H 8192 1/16 for each
# pair of rings, ROUNDS (2) rounds interleaved. From the bundle (BUNDLE=, default
# build-gpu/lab2.tar.xz; targets gpu_tests lstm_step bsconv_gpu train_lstm), about 3 minutes.
set -uo pipefail
O=$OUT; t0=$(date +%s)
FILTER=${FILTER:-'LstmRecurrenceGpu.WgmmaSparse*:LstmRecurrenceGpu.WgmmaStreamed*'}
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
timeout ${TEST_LIMIT:-150} dist/run gpu_tests --gtest_filter="$FILTER" \
  >$O/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A4 $O/tests.log | head -12
for r in $(seq ${ROUNDS:-2}); do
  for rings in 8:4 12:6 16:8 8:6 8:8; do
    ring=${rings%:*} bwd=${rings#*:}
    TESSERA_LSTM_SPARSE_STREAM_RING=$ring TESSERA_LSTM_SPARSE_BWD_STREAM_RING=$bwd timeout 60 \
      dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 --sparse 8192:0.0625:32 >$O/c.log 2>&1
    graph=$(grep -E '^tessera sparse graph' $O/c.log | grep -oE 'bs32 +[0-9.]+' | awk '{print $2}')
    echo "rings $ring / $bwd: graph $graph ms," \
      "forward $(grep -E '^recurrence fwd, wgmma' $O/c.log | grep -oE '[0-9.]+ us/step')," \
      "backward $(grep -E '^recurrence bwd, wgmma' $O/c.log | grep -oE '[0-9.]+ us/step')"
  done
done
rm -f $O/c.log
echo "all done at $(( $(date +%s) - t0 )) s"

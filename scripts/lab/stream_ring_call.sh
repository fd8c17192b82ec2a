#!/usr/bin/env bash
# device call (issue 16): the block-sparse streamed recurrence kernels' ring depth, forward
# (TESSERA_LSTM_SPARSE_STREAM_RING = 8, the default, 12 or 16 stages) and backward
# (TESSERA_LSTM_SPARSE_BWD_STREAM_RING = 4, the default, 6 or 8), fewer W units resident for the
# deeper rings. ncu of the forward at sparse H 8192 1/16 put 55% of the warps' samples on waits for
# a stage's box. First every LSTM, bsmm and convolution GPU test (FILTER=; the new ring cases and the
# review's changes to the gate dW among them, not yet run on a GPU), then lstm_step's graph step and
# recurrence rows at H 8192 1/16 for each pair of rings, ROUNDS (2) rounds interleaved; then, if a
# deeper pair was fastest, under it
# lstm_defaults_call.sh (every LSTM, bsmm and convolution GPU test, the issue's table, train_lstm,
# bsconv_gpu) and ncu of the two streamed kernels (unless past LIMIT, 300 s). From the bundle
# (BUNDLE=, default build-gpu/lab2.tar.xz; targets gpu_tests lstm_step bsconv_gpu train_lstm), about
# 4 minutes, 10 with the last part.
set -uo pipefail
O=$OUT; t0=$(date +%s)
# every LSTM, bsmm and convolution GPU test (the code since the last GPU run among them)
FILTER=${FILTER:-'LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*:CudaBsConv.*'}
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
timeout ${TEST_LIMIT:-240} dist/run gpu_tests --gtest_filter="$FILTER" \
  >$O/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A4 $O/tests.log | head -12
declare -A total  # rings -> the rounds' graph ms summed
for r in $(seq ${ROUNDS:-2}); do
  for rings in 8:4 12:6 16:8 8:6 8:8; do
    ring=${rings%:*} bwd=${rings#*:}
    TESSERA_LSTM_SPARSE_STREAM_RING=$ring TESSERA_LSTM_SPARSE_BWD_STREAM_RING=$bwd timeout 60 \
      dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 --sparse 8192:0.0625:32 >$O/c.log 2>&1
    graph=$(grep -E '^tessera sparse graph' $O/c.log | grep -oE 'bs32 +[0-9.]+' | awk '{print $2}')
    echo "rings $ring / $bwd: graph $graph ms," \
      "forward $(grep -E '^recurrence fwd, wgmma' $O/c.log | grep -oE '[0-9.]+ us/step')," \
      "backward $(grep -E '^recurrence bwd, wgmma' $O/c.log | grep -oE '[0-9.]+ us/step')"
    [ -n "$graph" ] && total[$rings]=$(awk "BEGIN {print ${total[$rings]:-0} + $graph}")
  done
done
rm -f $O/c.log
# the fastest pair of rings (the rounds' sum), if not the defaults: what making it the default would give
best=8:4
for rings in "${!total[@]}"; do
  awk "BEGIN {exit !(${total[$rings]} < ${total[$best]:-1e9})}" && best=$rings
done
echo "fastest rings: $best (${total[$best]:-?} ms over the rounds)"
if [ "$best" != 8:4 ] && [ $(( $(date +%s) - t0 )) -lt ${LIMIT:-300} ]; then
  export TESSERA_LSTM_SPARSE_STREAM_RING=${best%:*} TESSERA_LSTM_SPARSE_BWD_STREAM_RING=${best#*:}
  echo "under $best (lstm_defaults_call.sh: every LSTM, bsmm and convolution GPU test, the table, train_lstm):"
  BUNDLE=${BUNDLE:-build-gpu/lab2.tar.xz} bash scripts/lab/lstm_defaults_call.sh
  # ncu of the two streamed kernels under it: how much of their time the stage waits still take
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
  for dir in forward backward; do
    timeout 90 ncu --clock-control none --kernel-name-base demangled \
      --kernel-name "regex:lstm_wgmma_sparse_${dir}_kernel" --launch-count 1 --section SpeedOfLight \
      --section WarpStateStats --metrics lts__t_bytes.sum,lts__t_sector_hit_rate.pct -o "$O/best_$dir" \
      dist/bin/lstm_step --hidden 0 --dtypes bf16 --repeats 1 --warmup 0 --sparse 8192:0.0625:32 >/dev/null 2>&1
    ncu -i "$O/best_$dir.ncu-rep" --page details >"$O/best_$dir.txt" 2>&1
    echo "ncu $dir under $best: $(grep -E 'Duration|L2 Cache Throughput|lts__t_bytes|Warp Cycles Per Issued' \
      "$O/best_$dir.txt" | sed 's/  */ /g' | tr '\n' ';')"
    rm -f "$O/best_$dir.ncu-rep"
  done
fi
echo "all done at $(( $(date +%s) - t0 )) s"

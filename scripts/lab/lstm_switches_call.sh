#!/usr/bin/env bash
# device call (issue 16): three lab forms written 2026-12-07 and not yet run on a GPU, each off by
# default until this passes:
#   - TESSERA_BSMM_DW_PAIR_SUMS=1: nn::LSTM's bias gradient summed in bsmm_dw_pair's kernel (each
#     gate-0 column's first run adds up its four gates' dY columns) instead of col_sum after it;
#   - TESSERA_BSMM_QUADS=1: x·W_x's four gates of a column in one work item of the forward kernel
#     (column quads) instead of pairs;
#   - TESSERA_BSMM_DW_PACE=N below 8 (ticks of N steps; 8 is the default).
# First the GPU tests with both switches on (the quads' and the pair's tests set theirs
# themselves; the LSTM tests take the environment); then lstm_step --profile (graph step and the
# rows each form changes) with each switch 0 and 1, two rounds interleaved, on the random sparse
# H 4096 at 1/16 and H 8192 at 1/64; then pacing N = 8, 4, 2, 1 on those and H 8192 at 1/16.
# From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz). About 5 minutes; LIMIT=s stops
# starting runs after s seconds.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-270}
ms() { grep -E "$1" $O/c.log | head -1 | grep -oE 'bs32( [a-z]+)? +[0-9.]+' | awk '{print $NF}'; }
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
TESSERA_BSMM_DW_PAIR_SUMS=1 TESSERA_BSMM_QUADS=1 timeout 150 dist/run gpu_tests \
  --gtest_filter='CudaBsmmTensorCores.Gate*:LstmLayerGpu.*:LstmRecurrenceGpu.*:CudaLstm*.*' >$O/tests.log 2>&1
echo "tests (both on) rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A3 $O/tests.log | head -16
profile() {  # ENV... : one lstm_step --profile run of $layer under the given variables
  env "$@" timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 --sparse $layer \
    --profile >$O/c.log 2>&1
}
for r in 1 2; do
  for layer in 4096:0.0625:32 8192:0.015625:32; do
    for v in 0 1; do
      [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 3
      profile TESSERA_BSMM_DW_PAIR_SUMS=$v
      echo "$layer sums $v: graph $(ms '^tessera sparse graph') pair $(ms 'profile.*bsmm_dw_pair')" \
        "col_sum $(ms 'profile.*: col_sum ')"
      profile TESSERA_BSMM_QUADS=$v
      echo "$layer quads $v: graph $(ms '^tessera sparse graph') bsmm $(ms 'profile.*: bsmm ')"
    done
  done
done
for pace in 8 4 2 1; do
  for layer in 4096:0.0625:32 8192:0.015625:32 8192:0.0625:32; do
    [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 2
    profile TESSERA_BSMM_DW_PACE=$pace
    echo "$layer pace $pace: graph $(ms '^tessera sparse graph') dw $(ms 'profile.*: bsmm_dw ')" \
      "pair $(ms 'profile.*bsmm_dw_pair')"
  done
done
rm -f $O/c.log

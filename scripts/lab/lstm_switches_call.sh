#!/usr/bin/env bash
# device call (issue 16): three lab forms written 2026-12-07 and not yet run on a GPU, each off by
# default until this passes:
#   - TESSERA_BSMM_DW_PAIR_SUMS=1: nn::LSTM's bias gradient summed in bsmm_dw_pair's kernel (each
#     gate-0 column's first run adds up its four gates' dY columns) instead of col_sum after it;
#   - TESSERA_BSMM_QUADS=1: x·W_x's four gates of a column in one work item of the forward kernel
#     (column quads) instead of pairs;
#   - TESSERA_BSMM_DW_PACE=N below 8 (ticks of N steps; 8 is the default);
# and one question pacing raises: at sparse H 8192 1/16 the gate dW cuts n into 16 chunks (a 1 GB
# f32 workspace and its sum, 0.38 ms) so that X's strips stay in L2; paced, the waves may keep them
# there with 1 chunk, and then the pair (kept apart there by the chunks' memory) may run too.
# First the GPU tests with both switches on (the quads' and the pair's tests set theirs
# themselves; the LSTM tests take the environment); then lstm_step --profile (graph step and the
# rows each form changes) with each switch 0 and 1, two rounds interleaved, on the random sparse
# H 4096 at 1/16 and H 8192 at 1/64; then H 8192 at 1/16 with 16 chunks (the default), 1 chunk
# (the pair then runs) and 1 chunk without the pair, twice; then pacing N = 8, 4, 2, 1 on the three
# layers; last the table (lstm_defaults_call.sh's lstm_step command) with both switches on.
# From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz). About 7 minutes; LIMIT=s stops starting
# runs after s seconds (the table after LIMIT + 60).
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-330}
ms() { grep -E "$1" $O/c.log | head -1 | grep -oE 'bs32( [a-z]+)? +[0-9.]+' | awk '{print $NF}'; }
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
TESSERA_BSMM_DW_PAIR_SUMS=1 TESSERA_BSMM_QUADS=1 timeout 200 dist/run gpu_tests \
  --gtest_filter='CudaBsmmTensorCores.*:LstmLayerGpu.*:LstmRecurrenceGpu.*:CudaLstm*.*' >$O/tests.log 2>&1
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
layer=8192:0.0625:32
for r in 1 2; do
  for cfg in default:1 1:1 1:0; do
    [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 2
    if [ ${cfg%:*} = default ]; then profile TESSERA_BSMM_DW_PAIR=${cfg#*:}
    else profile TESSERA_BSMM_DW_CHUNKS=${cfg%:*} TESSERA_BSMM_DW_PAIR=${cfg#*:}; fi
    echo "$layer chunks ${cfg%:*} pair ${cfg#*:}: graph $(ms '^tessera sparse graph') dw $(ms 'profile.*: bsmm_dw ')" \
      "pair $(ms 'profile.*bsmm_dw_pair')"
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
# the table with both switches on (what flipping their defaults would give), cuDNN in the same run
if [ $(( $(date +%s) - t0 )) -lt $(( LIMIT + 60 )) ]; then
  sparse=2048:0.25:32,4096:0.0625:32,4096:0.0625:32:balanced,4096:0.25:32,8192:0.015625:32,8192:0.0625:32
  TESSERA_BSMM_DW_PAIR_SUMS=1 TESSERA_BSMM_QUADS=1 timeout 200 dist/run lstm_step --hidden 1024,2048 --dtypes bf16 \
    --repeats 3 --warmup 1 --sparse $sparse --json $O/lstm_step_switches.json >$O/lstm_step.log 2>&1
  echo "table (both on) rc $?"
  grep -E "graph" $O/lstm_step.log | grep -v " vs \|step-wise\|floor" | cut -c1-110
fi
rm -f $O/c.log

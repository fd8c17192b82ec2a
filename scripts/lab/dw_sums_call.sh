#!/usr/bin/env bash
# device call (issue 16): nn::LSTM's bias gradient summed in bsmm_dw_pair's kernel (each gate-0
# column's first run adds up its four gates' dY columns: TESSERA_BSMM_DW_PAIR_SUMS=1) against
# col_sum's kernel after it (0, the default until this passes). First the pair's and the LSTM
# layer's GPU tests with the switch on (the pair's test sets it itself); then lstm_step --profile
# (graph step, bsmm_dw_pair, col_sum) with 0 and 1, two rounds interleaved, on the random sparse
# H 4096 at 1/16 and H 8192 at 1/64 (where the pair runs); then the pacing lab (dw_pace_call.sh's
# N = 0, 8, 4, 2, 1) on the same two layers and H 8192 at 1/16. From the bundle (BUNDLE=, default
# build-gpu/lab2.tar.xz). About 4 minutes; LIMIT=s stops starting runs after s seconds.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-240}
ms() { grep -E "$1" $O/c.log | head -1 | grep -oE 'bs32( [a-z]+)? +[0-9.]+' | awk '{print $NF}'; }
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
TESSERA_BSMM_DW_PAIR_SUMS=1 timeout 120 dist/run gpu_tests \
  --gtest_filter='CudaBsmmTensorCores.Gate*:LstmLayerGpu.*:LstmRecurrenceGpu.*:CudaLstm*.*' >$O/tests.log 2>&1
echo "tests (sums in the kernel) rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A3 $O/tests.log | head -16
for r in 1 2; do
  for layer in 4096:0.0625:32 8192:0.015625:32; do
    for sums in 0 1; do
      [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 3
      TESSERA_BSMM_DW_PAIR_SUMS=$sums timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 \
        --warmup 1 --sparse $layer --profile >$O/c.log 2>&1
      echo "$layer sums $sums: graph $(ms '^tessera sparse graph') pair $(ms 'profile.*bsmm_dw_pair')" \
        "col_sum $(ms 'profile.*: col_sum ')"
    done
  done
done
for pace in 0 8 4 2 1; do
  for layer in 4096:0.0625:32 8192:0.015625:32 8192:0.0625:32; do
    [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 2
    TESSERA_BSMM_DW_PACE=$pace timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 \
      --sparse $layer --profile >$O/c.log 2>&1
    echo "$layer pace $pace: graph $(ms '^tessera sparse graph') dw $(ms 'profile.*: bsmm_dw ')" \
      "pair $(ms 'profile.*bsmm_dw_pair')"
  done
done
rm -f $O/c.log

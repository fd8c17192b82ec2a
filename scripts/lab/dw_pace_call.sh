#!/usr/bin/env bash
# device call (issue 16): the gate-run dW paced (TESSERA_BSMM_DW_PACE=N: no thread block more than
# N steps ahead of the grid's average, a bounded wait), so that the runs of the second and third
# waves, which read the same X strips, stay together and share them in L2. First the gate dW and
# LSTM layer GPU tests with pacing at 16; then lstm_step --profile's weight-gradient rows and graph
# step with N = 0 (off), 8 (the default), 4, 2 and 1 (PACES= others), two rounds interleaved, on
# the random sparse H 4096 at 1/16, H 8192 at 1/64 and 1/16 and the balanced H 4096 layer; then H
# 4096 at 1/4 with the pair off / on. From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz).
# About 4 minutes (LIMIT=s stops sooner). First run, 2026-12-07, N = 0 / 16 / 64, then 8 / 16 /
# 32: docs/bsmm_kernels.md's table.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-240}
ms() { grep -E "$1" $O/c.log | head -1 | grep -oE 'bs32( [a-z]+)? +[0-9.]+' | awk '{print $NF}'; }
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
TESSERA_BSMM_DW_PACE=16 timeout 90 dist/run gpu_tests \
  --gtest_filter='CudaBsmmTensorCores.Gate*:LstmLayerGpu.*' >$O/tests.log 2>&1
echo "tests (paced) rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A3 $O/tests.log | head -12
for r in $(seq ${ROUNDS:-2}); do
  for layer in ${LAYERS:-4096:0.0625:32 8192:0.015625:32 8192:0.0625:32 4096:0.0625:32:balanced}; do
    for pace in ${PACES:-0 8 4 2 1}; do
      [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 3
      TESSERA_BSMM_DW_PACE=$pace timeout 60 dist/run lstm_step \
        --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 --sparse $layer --profile >$O/c.log 2>&1
      echo "$layer pace $pace: graph $(ms '^tessera sparse graph') dw $(ms 'profile.*: bsmm_dw ')" \
        "pair $(ms 'profile.*bsmm_dw_pair')"
    done
  done
done
for pair in 0 1; do
  [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break
  TESSERA_BSMM_DW_PAIR=$pair timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 \
    --sparse 4096:0.25:32 --profile >$O/c.log 2>&1
  echo "4096:0.25:32 pair $pair: graph $(ms '^tessera sparse graph') dw $(ms 'profile.*: bsmm_dw ')" \
    "pair $(ms 'profile.*bsmm_dw_pair')"
done
rm -f $O/c.log

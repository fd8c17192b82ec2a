#!/usr/bin/env bash
# device call (issue 16): nn::LSTM's two weight gradients in one launch (bsmm_dw_pair: dpre read
# once, a column's input- and recurrent-mask entries in one run) against two bsmm_dw. First the
# GPU tests of the gate dW, the pair and the LSTM layer and recurrence; then, twice interleaved,
# lstm_step's graph step and the profile's weight-gradient rows (bsmm_dw, bsmm_dw_pair) for the
# random and balanced sparse H 4096 layers at 1/16, H 8192 at 1/64 and at 1/16, with
# TESSERA_BSMM_DW_PAIR=0 and 1; then the pair at H 8192 1/16 with 8 and 16 chunks forced (the memory
# rule keeps it apart there by default).
# From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz; targets gpu_tests lstm_step). About
# 2-3 minutes; LIMIT=s stops starting runs after s seconds; FILTER, TEST_LIMIT, ROUNDS and LAYERS
# narrow it.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-330}
ms() { grep -E "$1" $O/c.log | head -1 | grep -oE 'bs32( [a-z]+)? +[0-9.]+' | awk '{print $NF}'; }
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"
filter=${FILTER:-'CudaBsmmTensorCores.Gate*:LstmLayerGpu.*:LstmRecurrenceGpu.*:CudaLstm*.*'}
timeout ${TEST_LIMIT:-150} dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure|FAILED  \]" -A3 $O/tests.log | head -30
for r in $(seq ${ROUNDS:-2}); do
  for layer in ${LAYERS:-4096:0.0625:32 4096:0.0625:32:balanced 8192:0.015625:32 8192:0.0625:32}; do
    for pair in 0 1; do
      [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 3
      TESSERA_BSMM_DW_PAIR=$pair timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 \
        --sparse $layer --profile >$O/c.log 2>&1
      echo "$layer pair $pair: graph $(ms '^tessera sparse graph') dw $(ms 'profile.*: bsmm_dw ')" \
        "pair $(ms 'profile.*bsmm_dw_pair') rec_bwd $(ms 'profile.*lstm_recurrence_backward')"
    done
  done
done
# the pair at sparse H 8192 1/16, which the memory rule keeps apart: its chunk sums with 8 and 16 chunks
for chunks in 8 16; do
  [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break
  TESSERA_BSMM_DW_PAIR=1 TESSERA_BSMM_DW_CHUNKS=$chunks timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 \
    --repeats 2 --warmup 1 --sparse 8192:0.0625:32 --profile >$O/c.log 2>&1
  echo "8192:0.0625:32 pair 1 chunks $chunks: graph $(ms '^tessera sparse graph') pair $(ms 'profile.*bsmm_dw_pair')"
done
grep -E "profile" $O/c.log | head -20
rm -f $O/c.log

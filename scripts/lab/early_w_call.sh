#!/usr/bin/env bash
# device call (issue 16): the sparse streamed recurrences with their streamed W units first in a
# step and the step's first stages' W copies issued before the grid barrier, against the bundle
# before (BASE=, an lstm_step xz; default build-gpu/base_lstm_step.xz): lstm_step's graph step and
# recurrence rows at sparse H 8192 1/16, ROUNDS (2) rounds interleaved; then lstm_defaults_call.sh
# on this bundle (every LSTM, bsmm and convolution GPU test, the table, train_lstm,
# bsconv_gpu). From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz; targets gpu_tests lstm_step
# bsconv_gpu train_lstm), about 8 minutes.
set -uo pipefail
O=$OUT; t0=$(date +%s)
export BUNDLE=${BUNDLE:-build-gpu/lab2.tar.xz}
rm -rf dist; tar xJf "$BUNDLE"; cat dist/BUILD
xz -dc "${BASE:-build-gpu/base_lstm_step.xz}" >dist/bin/lstm_step_base && chmod +x dist/bin/lstm_step_base
. scripts/lab/lstm_step_row.sh  # row NAME PROGRAM [VAR=VALUE …]
for r in $(seq ${ROUNDS:-2}); do
  row "before" lstm_step_base
  row "${LABEL:-W copies before the barrier}" lstm_step
done
rm -f $O/c.log
echo "a/b done at $(( $(date +%s) - t0 )) s"
bash scripts/lab/lstm_defaults_call.sh

#!/usr/bin/env bash
# device call (issue 16): the block-sparse streamed recurrences' rings again, now that the forward
# has a producer warp per group and the backward issues its first stages' W copies before the grid
# barrier: lstm_step's graph step and recurrence rows at sparse H 8192 1/16, ROUNDS (2) rounds
# interleaved, for the defaults (forward 8 stages, backward 6), the forward's 6
# (TESSERA_LSTM_SPARSE_STREAM_RING=6: three a warpgroup, three more tiles resident a block), the
# backward's 8 (TESSERA_LSTM_SPARSE_BWD_STREAM_RING=8: four a row) and both; then
# lstm_defaults_call.sh (every LSTM, bsmm and convolution GPU test first, the ring cases of
# WgmmaSparseStreamedMatchesTheCpu among them; the table, train_lstm, bsconv_gpu); then issue
# 19's lab two-block form of the halo kernel against the defaults at bs 32 (TESSERA_BSCONV_HALO_TWO=1).
# From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz; targets gpu_tests lstm_step bsconv_gpu
# train_lstm), about 7 minutes on an H100.
set -uo pipefail
O=$OUT; t0=$(date +%s)
export BUNDLE=${BUNDLE:-build-gpu/lab2.tar.xz}
rm -rf dist; tar xJf "$BUNDLE"; cat dist/BUILD
. scripts/lab/lstm_step_row.sh  # row NAME PROGRAM [VAR=VALUE …]
for r in $(seq ${ROUNDS:-2}); do
  row "defaults (8 / 6)" lstm_step
  row "forward 6" lstm_step TESSERA_LSTM_SPARSE_STREAM_RING=6
  row "backward 8" lstm_step TESSERA_LSTM_SPARSE_BWD_STREAM_RING=8
  row "both (6 / 8)" lstm_step TESSERA_LSTM_SPARSE_STREAM_RING=6 TESSERA_LSTM_SPARSE_BWD_STREAM_RING=8
done
rm -f $O/c.log
echo "rings done at $(( $(date +%s) - t0 )) s"
bash scripts/lab/lstm_defaults_call.sh
# issue 19: the halo kernel's lab two-block form (TESSERA_BSCONV_HALO_TWO=1: 256-row entry-mode tiles,
# two thread blocks a multiprocessor) against the defaults (tall tiles) at bs 32, two rounds
for r in 1 2; do
  for two in 0 1; do
    TESSERA_BSCONV_HALO_TWO=$two timeout 90 dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 --block-sizes 32 \
      --densities 0.25 --repeats 10 >$O/bsconv_two.log 2>&1
    echo "bsconv two=$two round $r: $(grep -E '^(fwd|dgrad|wgrad) .*bs32' $O/bsconv_two.log | \
      awk '{print $1, $3, $6 " ms", $10}' | tr '\n' ';')"
  done
done
echo "all done at $(( $(date +%s) - t0 )) s"

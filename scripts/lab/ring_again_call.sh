#!/usr/bin/env bash
# A record: run on 2026-12-07; the ring switches, TESSERA_BSCONV_TILES and TESSERA_BSCONV_HALO_TWO were deleted
# after its A/B (docs/lstm_gpu.md, docs/convolution.md), so a run now times the defaults in their rows.
# device call (issues 16 and 19), from the bundle (BUNDLE=, default build-gpu/lab2.tar.xz; targets
# gpu_tests lstm_step bsconv_gpu train_lstm):
#   - the block-sparse streamed recurrences' rings again, now that the forward has a producer warp per
#     group and the backward issues its first stages' W copies before the grid barrier: lstm_step's
#     graph step and recurrence rows at sparse H 8192 1/16, two rounds, for the defaults (forward 8
#     stages, backward 6), the forward's 6 (TESSERA_LSTM_SPARSE_STREAM_RING=6: three a warpgroup, three
#     more tiles resident a block), the backward's 8 (TESSERA_LSTM_SPARSE_BWD_STREAM_RING=8: four a row)
#     and both;
#   - lstm_defaults_call.sh (every LSTM, bsmm and convolution GPU test, the table, train_lstm,
#     bsconv_gpu), or with LEAN=1 the tests alone;
#   - issue 19's lab switches against the defaults at bs 32 and 64, two rounds: the fewest-positions
#     tile boxes (TESSERA_BSCONV_TILES=fewest, and =balanced with the halo weighed in) and the
#     two-block form (TESSERA_BSCONV_HALO_TWO=1);
#   - ncu of the bs-64 dW and forward kernels if time allows.
# LEAN=1 runs the convolution tests and the tiles' A/B first, then the LSTM tests, a round of the
# rings, the two-block form, and the second rounds, so that a call cut short has the first parts. About 7 minutes on an H100 (LEAN=1 about 5).
set -uo pipefail
O=$OUT; t0=$(date +%s)
export BUNDLE=${BUNDLE:-build-gpu/lab2.tar.xz}
rm -rf dist; tar xJf "$BUNDLE"; cat dist/BUILD
. scripts/lab/lstm_step_row.sh  # row NAME PROGRAM [VAR=VALUE …]
rings() {  # one round of the four ring settings at H 8192 1/16
  row "defaults (8 / 6)" lstm_step
  row "forward 6" lstm_step TESSERA_LSTM_SPARSE_STREAM_RING=6
  row "backward 8" lstm_step TESSERA_LSTM_SPARSE_BWD_STREAM_RING=8
  row "both (6 / 8)" lstm_step TESSERA_LSTM_SPARSE_STREAM_RING=6 TESSERA_LSTM_SPARSE_BWD_STREAM_RING=8
  rm -f $O/c.log
  echo "rings round done at $(( $(date +%s) - t0 )) s"
}
# issue 19, the lab's two switches against the defaults (tall tiles at bs 32, boxes innermost first) at
# density 0.25, bs 32 and 64, both shapes: the two-block form (TESSERA_BSCONV_HALO_TWO=1: 256-row
# entry-mode tiles, two thread blocks a multiprocessor; bs 32 only) and the fewest-positions tile boxes
# (TESSERA_BSCONV_TILES=fewest: 8 × 8 × 4 samples at 56 × 56, 4 × 4 × 16 at 28 × 28; =balanced: 8 × 8 × 4,
# 32 × 4 × 2)
conv_round() {  # ROUND [CONFIG ...]: the configurations (default: all three)
  local r=$1; shift
  local cfgs=${*:-defaults TESSERA_BSCONV_TILES=fewest TESSERA_BSCONV_TILES=balanced TESSERA_BSCONV_HALO_TWO=1}
  for cfg in $cfgs; do
    env $( [ $cfg = defaults ] || echo $cfg ) timeout 90 dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 \
      --block-sizes 32,64 --densities 0.25 --repeats ${CONV_REPEATS:-6} >$O/bsconv_ab.log 2>&1
    echo "== bsconv $cfg round $r rc $? at $(( $(date +%s) - t0 )) s"
    grep -E "^ *(fwd|dgrad|wgrad)" $O/bsconv_ab.log | grep -v cuDNN | cut -c1-120
    cat $O/bsconv_ab.log >>$O/bsconv_ab_all.log
  done
}
tests() {  # NAME FILTER
  timeout 240 dist/run gpu_tests --gtest_filter="$2" >$O/tests_$1.log 2>&1
  echo "$1 tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests_$1.log | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" $O/tests_$1.log | head -8
}
if [ "${LEAN:-0}" = 1 ]; then  # LEAN=1: the most needed first, so that a call cut short still has them
  tests conv 'CudaBsConv.*'
  conv_round 1 defaults TESSERA_BSCONV_TILES=fewest TESSERA_BSCONV_TILES=balanced
  tests lstm 'LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*'
  rings; conv_round 1 TESSERA_BSCONV_HALO_TWO=1; conv_round 2; rings
else
  rings; rings
  bash scripts/lab/lstm_defaults_call.sh
  conv_round 1; conv_round 2
fi
# issue 19: what bounds the bs-64 weight gradient (the per-tap dW kernel, useful-frac 0.40-0.42 at
# N 64 × 56 × 56) and the bs-64 forward halo kernel (0.46-0.49): ncu of one launch each, if time allows
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
for k in gradient_kernel halo_kernel; do
  [ $(( $(date +%s) - t0 )) -lt 500 ] || break
  timeout 60 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:$k --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy dist/bin/bsconv_gpu --shapes n64h56c256 --block-sizes 64 --densities 0.25 --repeats 1 \
    >$O/ncu_$k.txt 2>&1
  echo "ncu $k rc $?: $(grep -E 'Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Through' \
    $O/ncu_$k.txt | awk '{$1=$1};1' | tr '\n' ';')"
done
echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# device call (issues 16 and 19), from the bundle (BUNDLE=, default build-gpu/lab2.tar.xz; targets
# gpu_tests lstm_step bsconv_gpu train_lstm), after the tile boxes became the fewest covered positions
# (conv_tiles.h's TileBoxes) and the lab's two-block form and LSTM rings were deleted:
#   1. the convolution GPU tests, then every other GPU test (the count for the issues' notes);
#   2. bsconv_gpu's table at the defaults: both shapes, bs 32 and 64, densities 0.1, 0.25, 0.5 and 1
#      ($OUT/bsconv.json), and density 0.25 a second time; bs 64 with the per-tap dW kernel
#      (TESSERA_BSCONV_DW_WIDE=0) against the new default, the halo dW kernel's wide tiles, two rounds;
#      bs 32 with 256-row tiles against the tall 512-row ones (their boxes changed: 8 × 8 × 8 samples);
#   3. ncu of the bs-32 forward halo kernel (tall tiles) and the bs-64 halo dW kernel at N 64 × 56 × 56,
#      density 0.25, if time allows.
# About 6 minutes on an H100; REST_BY / NCU_BY (seconds from the start) skip the other tests / the
# profiles when started later than that.
set -uo pipefail
O=$OUT; t0=$(date +%s); ENV=
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
tests() {  # NAME FILTER
  timeout 300 dist/run gpu_tests --gtest_filter="$2" >$O/tests_$1.log 2>&1
  echo "$1 tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests_$1.log | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|SKIPPED \]" $O/tests_$1.log | head -12
}
table() {  # NAME ARGS...: a bsconv_gpu run, its table's rows (VAR=VALUE before the name: its environment)
  local name=$1; shift
  timeout 120 env $ENV dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 "$@" >$O/bsconv_$name.log 2>&1
  echo "== bsconv $name rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "^(fwd|dgrad|wgrad)" $O/bsconv_$name.log | cut -c1-100
}
tests conv 'CudaBsConv.*:CudaEdgeBias.*:CudaConvLayers.*'
table all --block-sizes 32,64 --densities 0.1,0.25,0.5,1 --repeats 8 --json $O/bsconv.json
ENV=TESSERA_BSCONV_DW_WIDE=0 table pertap64 --block-sizes 64 --densities 0.25 --repeats 8
table again --block-sizes 32,64 --densities 0.25 --repeats 8
ENV=TESSERA_BSCONV_DW_WIDE=0 table pertap64b --block-sizes 64 --densities 0.25 --repeats 8
table rows256 --block-sizes 32 --densities 0.25 --repeats 8 --halo-rows 256
[ $(( $(date +%s) - t0 )) -lt ${REST_BY:-200} ] && tests rest '-CudaBsConv.*:CudaEdgeBias.*:CudaConvLayers.*'
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
for k in halo_kernel:32 dw_halo_kernel:64; do
  [ $(( $(date +%s) - t0 )) -lt ${NCU_BY:-480} ] || break
  timeout 60 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:${k%:*} --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy dist/bin/bsconv_gpu --shapes n64h56c256 --block-sizes ${k#*:} \
    --densities 0.25 --repeats 1 >$O/ncu_${k%:*}.txt 2>&1
  rc=$?
  keys='Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Through|Warp Cycles Per Issued'
  echo "ncu $k rc $rc: $(grep -E "$keys" $O/ncu_${k%:*}.txt | awk '{$1=$1};1' | tr '\n' ';')"
done
echo "all done at $(( $(date +%s) - t0 )) s"

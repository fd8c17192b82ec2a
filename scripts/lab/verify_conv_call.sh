#!/usr/bin/env bash
# device call (issue 19): main's convolution code checked and timed in one short call, from the bundle
# (BUNDLE=, default build-gpu/conv.tar.xz; targets gpu_tests bsconv_gpu):
#   1. the convolution GPU tests (the strip forms' paths among them, with launch counters);
#   2. bsconv_gpu at the defaults: both shapes, bs 32 and 64, densities 0.25, 0.5 and 1 ($OUT/bsconv.json);
#   3. bs 32 at density 0.25 with the dW's strip form (--dw-strip on, the default since 2026-12-08) against
#      the halo dW kernel (--dw-strip off, with bs 64 too), ROUNDS rounds (2);
#   4. ncu of the bs-32 dW kernels (the halo dW kernel, its strip form), before NCU_BY seconds (150).
# Everything is written to two files under $OUT (a call brings back a few files only). About 2 minutes.
set -uo pipefail
source "$(dirname "$0")/conv_tests.sh"  # the bundle unpacked, the convolution GPU tests
table() {  # NAME ARGS...: a bsconv_gpu run, its table's rows
  local name=$1; shift
  echo "== bsconv $name" >>$LOG
  timeout 150 dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 --repeats 8 "$@" >>$LOG 2>&1
  echo "== bsconv $name rc $? at $(( $(date +%s) - t0 )) s"
  sed -n "/^== bsconv $name\$/,\$p" $LOG | grep -E "^(fwd|dgrad|wgrad)" | cut -c1-100
}
table defaults --block-sizes 32,64 --densities 0.25,0.5,1 --json $O/bsconv.json
for round in $(seq 1 ${ROUNDS:-2}); do
  table dwstrip$round --dw-strip on --block-sizes 32 --densities 0.25
  table base$round --dw-strip off --block-sizes 32,64 --densities 0.25  # bs 64 too: its 28 × 28 fwd was 0.49 once
done
# 4. ncu (N 64 × 56 × 56, bs 32): the halo dW kernel and its strip form
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
for run in off:dw_halo_kernel on:dw_strip_kernel; do
  [ $(( $(date +%s) - t0 )) -lt ${NCU_BY:-150} ] || break
  k=${run#*:}
  echo "== ncu $k" >>$O/ncu.txt
  timeout 60 ncu --clock-control none --kernel-name-base demangled \
    --kernel-name regex::$k --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    dist/bin/bsconv_gpu --shapes n64h56c256 --block-sizes 32 --densities 0.25 --repeats 1 --dw-strip ${run%%:*} \
    >>$O/ncu.txt 2>&1
  rc=$?
  keys='Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|Mem Pipes Busy'
  keys="$keys|Warp Cycles Per Issued|Grid Size"
  echo "ncu $k rc $rc: $(sed -n "/^== ncu $k\$/,\$p" $O/ncu.txt | grep -E "$keys" | awk '{$1=$1};1' | tr '\n' ';')"
done
echo "all done at $(( $(date +%s) - t0 )) s"

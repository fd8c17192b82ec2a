#!/usr/bin/env bash
# device call (issue 19): main's convolution code checked and timed in one short call, from the bundle
# (BUNDLE=, default build-gpu/conv.tar.xz; targets gpu_tests bsconv_gpu):
#   1. the convolution GPU tests (the lab's compile-time taps loop among their paths);
#   2. bsconv_gpu at density 0.25, both shapes, bs 32 and 64, at the defaults;
#   3. bs 32 with the compile-time taps loop (TESSERA_BSCONV_HALO_TAPLOOP=1) against the defaults,
#      the taps loop on 256-row tiles (TESSERA_BSCONV_HALO_ROWS=256) and the strip form
#      (TESSERA_BSCONV_HALO_STRIP=1: bs 32's forward and dgrad), ROUNDS rounds (2);
#   4. ncu of the bs-32 forward halo kernel (taps loop, then strip form) and of the halo dW kernel,
#      before NCU_BY seconds (300).
# About 3.5 minutes on an H100.
set -uo pipefail
O=$OUT; t0=$(date +%s)
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/conv.tar.xz}"; cat dist/BUILD
timeout 200 dist/run gpu_tests --gtest_filter='CudaBsConv.*:CudaEdgeBias.*:CudaConvLayers.*' >$O/tests_conv.log 2>&1
echo "conv tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests_conv.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $O/tests_conv.log | head -12
table() {  # NAME [VAR=VALUE] ARGS...: a bsconv_gpu run at density 0.25, its table's rows
  local name=$1 env=$2; shift 2
  timeout 120 env $env dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 --densities 0.25 --repeats 8 "$@" \
    >$O/bsconv_$name.log 2>&1
  echo "== bsconv $name rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "^(fwd|dgrad|wgrad)" $O/bsconv_$name.log | cut -c1-100
}
table defaults TESSERA_BSCONV_HALO_TAPLOOP=0 --block-sizes 32,64 --json $O/bsconv.json
for round in $(seq 1 ${ROUNDS:-2}); do
  table taploop$round TESSERA_BSCONV_HALO_TAPLOOP=1 --block-sizes 32
  table walk$round TESSERA_BSCONV_HALO_TAPLOOP=0 --block-sizes 32
  table taploop256_$round "TESSERA_BSCONV_HALO_TAPLOOP=1 TESSERA_BSCONV_HALO_ROWS=256" --block-sizes 32
  table strip$round TESSERA_BSCONV_HALO_STRIP=1 --block-sizes 32
done
# 4. ncu (N 64 × 56 × 56, bs 32): the forward halo kernel with the taps loop and in the strip form, the halo dW kernel
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
for run in taploop:halo_kernel strip:halo_kernel taploop:dw_halo_kernel; do
  [ $(( $(date +%s) - t0 )) -lt ${NCU_BY:-300} ] || break
  k=${run#*:}; how=TESSERA_BSCONV_HALO_TAPLOOP=1
  [ ${run%%:*} = strip ] && how=TESSERA_BSCONV_HALO_STRIP=1
  timeout 60 env $how ncu --clock-control none --kernel-name-base demangled \
    --kernel-name regex::$k --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    dist/bin/bsconv_gpu --shapes n64h56c256 --block-sizes 32 --densities 0.25 --repeats 1 >$O/ncu_${run/:/_}.txt 2>&1
  rc=$?
  keys='Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Issue Slots Busy|Mem Pipes Busy|Warp Cycles Per Issued'
  echo "ncu $run rc $rc: $(grep -E "$keys" $O/ncu_${run/:/_}.txt | awk '{$1=$1};1' | tr '\n' ';')"
done
echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# device call (issue 19): where the bs-32 halo kernel's time goes, from the bundle
# build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets gpu_tests bsconv_gpu):
#   1. the convolution GPU tests (CudaBsConv, CudaEdgeBias, CudaConvLayers);
#   2. bsconv_gpu at N 64 × 56 × 56, 256 → 256, density 0.25, bs 32 and 64, with the tall tiles
#      (512 rows) and without (256 rows): their share, not measured yet (docs/convolution.md);
#   3. ncu source counters of the bs-32 forward halo kernel (tall tiles), one launch: warp stall
#      samples per SASS instruction ($OUT/halo32.sass.csv, $OUT/halo32.src.csv; the report in
#      $OUT/halo32.ncu-rep), to find where the fixed-latency waits sit.
# About 2 minutes. Everything goes to $OUT/bsconv.txt; a digest is printed.
set -uo pipefail
O=$OUT; t0=$(date +%s); L=$O/bsconv.txt
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD | tee $L
timeout 200 dist/run gpu_tests --gtest_filter='CudaBsConv.*:CudaEdgeBias.*:CudaConvLayers.*' >$O/t.txt 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/t.txt | tr '\n' ' ')"; cat $O/t.txt >>$L; rm -f $O/t.txt
for rows in 256 512; do
  echo "== halo rows $rows at $(( $(date +%s) - t0 )) s" | tee -a $L
  timeout 120 dist/run bsconv_gpu --shapes n64h56c256 --block-sizes 32,64 --densities 0.25 --halo-rows $rows \
    --repeats 10 >$O/b.txt 2>&1
  cat $O/b.txt >>$L; grep -E "fwd|dgrad|wgrad" $O/b.txt | cut -c1-110; rm -f $O/b.txt
done
echo "== ncu at $(( $(date +%s) - t0 )) s" | tee -a $L
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
timeout 150 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:halo_kernel --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section LaunchStats --section SpeedOfLight \
  -o $O/halo32 dist/bin/bsconv_gpu --shapes n64h56c256 --block-sizes 32 --densities 0.25 --halo-rows 512 \
  --repeats 1 >$O/n.txt 2>&1
tail -3 $O/n.txt; cat $O/n.txt >>$L; rm -f $O/n.txt
ncu -i $O/halo32.ncu-rep --page source --csv --print-source sass >$O/halo32.sass.csv 2>&1 || true
ncu -i $O/halo32.ncu-rep --page source --csv --print-source cuda >$O/halo32.src.csv 2>&1 || true
ls -la $O
echo "all done at $(( $(date +%s) - t0 )) s"

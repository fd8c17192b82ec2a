#!/usr/bin/env bash
# device call (issue 13): the closing figures of a build, from the bundle build-gpu/next.tar.xz
# (carry it; targets gpu_tests attention_gpu at least):
#   1. every GPU test (gpu_tests, TEST_TIMEOUT 300 s), the counts and the failures' names;
#   2. attention_gpu over the shapes, head dims 64 and 128, all layouts (SHAPES to change);
#   3. PyTorch's SDPA and FlexAttention on the same shapes (NO_TORCH=1 skips);
#   4. ncu of the sm_90a forward on the dense and the local layout at B8 H16 T4096 (NO_NCU=1 skips):
#      throughput, warp stalls, issue slots, to tell where short rows lose time.
# Everything goes to $OUT/final.txt; a digest is printed.
set -uo pipefail
t0=$(date +%s); L=$OUT/final.txt
rm -rf dist; tar xJf build-gpu/next.tar.xz; cat dist/BUILD | tee $L
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $L
timeout ${TEST_TIMEOUT:-300} dist/run gpu_tests > $OUT/t.txt 2>&1
echo "gpu_tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' $OUT/t.txt | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' $OUT/t.txt | head -20; cat $OUT/t.txt >> $L; rm -f $OUT/t.txt
SH=${SHAPES:-b16h12t1024,b64h6t256,b8h16t4096,b2h16t16384}
echo "== attention_gpu" | tee -a $L
timeout 240 dist/run attention_gpu --shapes $SH --head-dims 64,128 --layouts dense,local,fixed,strided --repeats 10 \
  --json $OUT/attention_gpu.json > $OUT/a.txt 2>&1
cat $OUT/a.txt >> $L; grep -E "fwd |fwd\+bwd  " $OUT/a.txt | cut -c1-90; rm -f $OUT/a.txt
if [ -z "${NO_TORCH:-}" ]; then
  echo "== PyTorch at $(( $(date +%s) - t0 )) s" | tee -a $L
  timeout 200 python3 bench/attention_torch.py --shapes $SH --head-dims 64,128 --layouts dense,local,strided \
    --repeats 10 2>&1 | tee -a $L | grep -v "^\s*$" | tail -40
fi
if [ -z "${NO_NCU:-}" ]; then
  for layout in dense local; do
    echo "== ncu forward, $layout at $(( $(date +%s) - t0 )) s" | tee -a $L
    timeout 120 ncu --clock-control none --kernel-name regex:flash_forward -c 1 --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
      dist/run attention_gpu --shapes b8h16t4096 --head-dims 64 --layouts $layout --repeats 1 \
      > $OUT/n.txt 2>&1
    cat $OUT/n.txt >> $L; grep -E "Duration|Throughput|gmma|Stall|Issued|Eligible|No Eligible|Achieved Occ|Grid Size" \
      $OUT/n.txt | cut -c1-100 | head -24; rm -f $OUT/n.txt
  done
fi
echo "all done at $(( $(date +%s) - t0 )) s"

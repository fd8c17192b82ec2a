#!/usr/bin/env bash
# device call (issue 16): where the streamed recurrence kernels of sparse H 8192 at 1/16 spend
# their time: ncu (speed of light and memory workload; DRAM and L2 bytes, L2 hit rate) of one
# launch each of the sparse forward and backward (W_h, 33.5 MB, streamed from L2 past what shared
# memory holds), and of the dense H 2048 streamed forward (the same W_h bytes) for comparison.
# From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz; target lstm_step), about 2 minutes.
# $OUT/<name>.txt: ncu's details page.
set -uo pipefail
O=$OUT; t0=$(date +%s)
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
run() {  # NAME KERNEL-REGEX LSTM_STEP-ARGS...
  local name=$1 kernel=$2; shift 2
  timeout 150 ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:$kernel" --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct \
    -o "$O/$name" dist/bin/lstm_step --dtypes bf16 --repeats 1 --warmup 0 "$@" >"$O/$name.log" 2>&1
  echo "$name rc $? at $(( $(date +%s) - t0 )) s"
  ncu -i "$O/$name.ncu-rep" --page details >"$O/$name.txt" 2>&1 || true
  grep -E "^  [a-z_]+ |Duration|Memory Throughput|DRAM Throughput|L2 Hit Rate|dram__bytes|lts__t|Compute \(SM\)" \
    "$O/$name.txt" | sed 's/  */ /g' | head -14
}
run sp16fwd lstm_wgmma_sparse_forward_kernel --hidden 0 --sparse 8192:0.0625:32
run sp16bwd lstm_wgmma_sparse_backward_kernel --hidden 0 --sparse 8192:0.0625:32
run sp64fwd lstm_wgmma_sparse_forward_kernel --hidden 0 --sparse 8192:0.015625:32
run d2048fwd lstm_wgmma_forward_streamed_kernel --hidden 2048 --sparse none
rm -f "$O"/*.ncu-rep "$O"/*.log
echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# device call (issue 16): ncu of the block-sparse wgmma recurrence kernels and bsmm_dw's gate-run
# kernel on the sparse H 4096 layer (1/16, bs 32; LAYOUT=balanced by default, random, or any layer as
# lstm_step's --sparse takes it, e.g. LAYOUT=8192:0.0625:32), from the
# bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another; target lstm_step), about a minute. For
# each of the forward, the backward and the weight gradient (KERNELS="fwd bwd dw" by default), one
# launch: speed of light, warp states, launch statistics and source counters ($OUT/spfwd.txt,
# $OUT/spbwd.txt, $OUT/spdw.txt; warp stall samples per SASS instruction in $OUT/sp*.sass.csv,
# read by address ranges as docs/convolution.md's digest of the halo kernel does). The tests and
# timings of the same kernels: lstm_wgmma_call.sh.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
case ${LAYOUT-balanced} in  # random, balanced, or a layer as lstm_step's --sparse takes it
  random) layout=4096:0.0625:32 ;;
  balanced) layout=4096:0.0625:32:balanced ;;
  *) layout=$LAYOUT ;;
esac
sections=(--section SpeedOfLight --section WarpStateStats --section LaunchStats --section SourceCounters
  --section MemoryWorkloadAnalysis)
for dir in ${KERNELS-fwd bwd dw}; do
  case $dir in
    fwd) kernel=lstm_wgmma_sparse_forward_kernel ;;
    bwd) kernel=lstm_wgmma_sparse_backward_kernel ;;
    *) kernel=gate_gradient_kernel ;;
  esac
  TESSERA_LSTM_WGMMA=1 timeout 150 ncu --clock-control none --kernel-name-base demangled \
    --kernel-name "regex:$kernel" --launch-count 1 "${sections[@]}" -o "$O/sp$dir" \
    dist/bin/lstm_step --hidden 0 --dtypes bf16 --repeats 1 --warmup 0 --sparse "$layout" >"$O/sp$dir.log" 2>&1
  echo "$dir ($layout) rc $? at $(( $(date +%s) - t0 )) s"
  ncu -i "$O/sp$dir.ncu-rep" --page details >"$O/sp$dir.txt" 2>&1 || true
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Hit Rate" "$O/sp$dir.txt"
  grep -E "Registers Per" "$O/sp$dir.txt"
  grep -E "Warp Cycles Per Issued" "$O/sp$dir.txt"
  ncu -i "$O/sp$dir.ncu-rep" --page source --csv --print-source sass >"$O/sp$dir.sass.csv" 2>&1 || true
done
rm -f "$O"/*.ncu-rep "$O"/*.log
ls -la "$O"; echo "all done at $(( $(date +%s) - t0 )) s"

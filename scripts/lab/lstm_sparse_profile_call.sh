#!/usr/bin/env bash
# device call (issue 16): where the block-sparse wgmma forward's step goes. On H 4096 at 1/16, bs 32,
# lstm_wgmma_sparse_forward.cu takes 18 µs a step even on a balanced layout (8 block rows a group:
# 16 m64n128k16 wgmmas, a µs or two), against 12 for the production kernel (docs/lstm_gpu.md, the
# block-sparse layers' second run), so most of its step is fixed cost. From the bundle
# build-gpu/lab.tar.xz (carry it; BUNDLE= another; target lstm_step), about 2 minutes:
#   1. ncu of one launch of the kernel (TESSERA_LSTM_WGMMA=1, the balanced layout): speed of light,
#      warp states, launch statistics and source counters (warp stall samples per SASS instruction:
#      $OUT/spfwd.sass.csv; the details page $OUT/spfwd.txt);
#   2. the same for the production forward kernel (TESSERA_LSTM_WGMMA=0) beside it ($OUT/prod.txt).
# Read the SASS csv by address ranges as docs/convolution.md's digest of the halo kernel does.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
sections=(--section SpeedOfLight --section WarpStateStats --section LaunchStats --section SourceCounters)
run_ncu() {  # NAME CHOICE KERNEL_REGEX
  TESSERA_LSTM_WGMMA=$2 timeout 200 ncu --clock-control none --kernel-name-base demangled \
    --kernel-name "regex:$3" --launch-count 1 "${sections[@]}" -o "$O/$1" \
    dist/bin/lstm_step --hidden 0 --dtypes bf16 --repeats 1 --warmup 0 --sparse 4096:0.0625:32:balanced \
    >"$O/$1.log" 2>&1
  echo "$1 rc $? at $(( $(date +%s) - t0 )) s"; tail -2 "$O/$1.log"
  ncu -i "$O/$1.ncu-rep" --page details >"$O/$1.txt" 2>&1 || true
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Issued Warp|Warp Cycles Per Issued" \
    "$O/$1.txt" | head -12
}
run_ncu spfwd 1 lstm_wgmma_sparse_forward_kernel
ncu -i "$O/spfwd.ncu-rep" --page source --csv --print-source sass >"$O/spfwd.sass.csv" 2>&1 || true
run_ncu prod 0 lstm_persistent_kernel
rm -f "$O"/*.ncu-rep
ls -la "$O"; echo "all done at $(( $(date +%s) - t0 )) s"

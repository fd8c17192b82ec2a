#!/usr/bin/env bash
# device call (issue 16): what bounds bsmm_dw's gate-run kernel at sparse H 8192 at 1/16 (B 64, T 256,
# bf16; X [16384, 8192] 268 MB, dpre [16384, 32768] 1.07 GB, L2 50 MB): ncu (speed of light, memory,
# warp states, and the metrics below) of every gate_gradient_kernel and sum_parts launch of one
# step, with the default 16 chunks and with 1 chunk (TESSERA_BSMM_DW_CHUNKS=1). Uses the dist/ of
# the warm machine if there (else the bundle). About 1-2 minutes. $OUT/dw_chunks*.txt.
set -uo pipefail
O=$OUT; t0=$(date +%s)
[ -x dist/run ] || { B=${BUNDLE:-build-gpu/lab.tar.xz}; tar xJf "$B"; }
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct
m+=,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
for chunks in ${CHUNKS:-16 1}; do
  [ $(( $(date +%s) - t0 )) -lt ${LIMIT:-200} ] || break
  TESSERA_BSMM_DW_CHUNKS=$chunks timeout 150 ncu --clock-control none --kernel-name-base demangled \
    --kernel-name "regex:gate_gradient_kernel|sum_parts" --launch-count 5 --metrics "$m" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats -o "$O/dw$chunks" \
    dist/bin/lstm_step --hidden 0 --dtypes bf16 --repeats 1 --warmup 0 --sparse 8192:0.0625:32 \
    >"$O/dw_chunks$chunks.log" 2>&1
  echo "chunks $chunks rc $? at $(( $(date +%s) - t0 )) s"
  ncu -i "$O/dw$chunks.ncu-rep" --page details >"$O/dw_chunks$chunks.txt" 2>&1
  grep -E "gate_gradient|sum_parts|Duration|DRAM Throughput|L2 Hit|dram__bytes|lts__t_bytes|gmma|Cycles Per Issued" \
    "$O/dw_chunks$chunks.txt" | sed 's/  */ /g' | cut -c1-110
done
rm -f "$O"/*.ncu-rep

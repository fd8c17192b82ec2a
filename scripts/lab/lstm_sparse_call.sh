#!/usr/bin/env bash
# device call (issue 16): the block-sparse wgmma kernels after their epilogues' reads moved before the
# product (forward: gx packed in registers, issued while the step's operand arrives, the bias held in
# registers; backward: the saved gates and cells, c_{t-1} and dy_t likewise), and every recurrence
# kernel's activations on the hardware reciprocal (lstm_gate_math.cuh). From the bundle
# build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets gpu_tests lstm_step), about 1 minute
# (30 s of it on the GPU, 2026-12-06):
#   1. the LSTM GPU tests (the wgmma kernels against the CPU, the layer under every choice);
#   2. lstm_step on dense H 1024 and the sparse H 4096 layer at 1/16, bs 32, random and balanced:
#      the layers (default choice) against cuDNN, the recurrence's µs per step, production and wgmma;
#   3. ncu of one launch of the wgmma forward on the balanced layout: speed of light, warp
#      states, launch statistics, source counters ($OUT/spfwd.txt, per SASS instruction
#      $OUT/spfwd.sass.csv).
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
timeout 180 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudnnLstmGpu.*:CudaModels.*' \
  >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $O/tests.log | head
echo "== lstm_step, dense H1024 and sparse H4096, at $(( $(date +%s) - t0 )) s"
timeout 200 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 \
  --sparse 4096:0.0625:32,4096:0.0625:32:balanced --json $O/lstm_step.json >$O/lstm_step.log 2>&1
grep -E "graph|recurrence|not run" $O/lstm_step.log | cut -c1-150 | head -30
echo "== ncu at $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
sections=(--section SpeedOfLight --section WarpStateStats --section LaunchStats --section SourceCounters)
TESSERA_LSTM_WGMMA=1 timeout 150 ncu --clock-control none --kernel-name-base demangled \
  --kernel-name "regex:lstm_wgmma_sparse_forward_kernel" --launch-count 1 "${sections[@]}" -o "$O/spfwd" \
  dist/bin/lstm_step --hidden 0 --dtypes bf16 --repeats 1 --warmup 0 --sparse 4096:0.0625:32:balanced \
  >"$O/spfwd.log" 2>&1
echo "ncu rc $? at $(( $(date +%s) - t0 )) s"; tail -2 "$O/spfwd.log"
ncu -i "$O/spfwd.ncu-rep" --page details >"$O/spfwd.txt" 2>&1 || true
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Issued Warp|Warp Cycles Per Issued" \
  "$O/spfwd.txt" | head -12
ncu -i "$O/spfwd.ncu-rep" --page source --csv --print-source sass >"$O/spfwd.sass.csv" 2>&1 || true
rm -f "$O"/*.ncu-rep
ls -la "$O"; echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# device call (issue 16): the wgmma step floor (kernels/common/cuda/lstm_wgmma_floor.cu) beside
# the production recurrence, from the bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another;
# targets gpu_tests lstm_step). About 2.5 minutes:
#   1. LstmRecurrenceGpu.WgmmaStepFloorComputesItsSteps (the lab kernels against the CPU; a hang here
#      would be the split grid barrier: the timeout ends it), WgmmaForwardMatchesTheCpu (the dense
#      forward on wgmma) and the other recurrence tests;
#   2. lstm_step on dense H 1024 and the sparse H 4096 layer: the compiled layers, the production
#      recurrence's µs per step, "recurrence fwd, wgmma" (the dense forward on wgmma,
#      lstm_wgmma_forward.cu), and the step-floor rows "step floor: wgmma forward / backward"
#      with and without multicast (µs per step, against "recurrence fwd / bwd" and the bare grid
#      barrier);
#   3. lstm_step on dense H 1024 again with TESSERA_LSTM_WGMMA=1: the compiled layer (tessera
#      graph) with the wgmma forward, against cuDNN in the same run (the 1.1x target).
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
timeout 180 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.*' >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $O/tests.log | head
echo "== lstm_step at $(( $(date +%s) - t0 )) s"
timeout 200 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 --sparse 4096:0.0625:32 \
  --json $O/lstm_step.json >$O/lstm_step.log 2>&1
grep -E "graph|recurrence|floor|not run" $O/lstm_step.log | cut -c1-150 | head -40
echo "== lstm_step, dense H1024 with the wgmma forward (TESSERA_LSTM_WGMMA=1) at $(( $(date +%s) - t0 )) s"
TESSERA_LSTM_WGMMA=1 timeout 120 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 \
  --json $O/lstm_step_wgmma.json >$O/lstm_step_wgmma.log 2>&1
grep -E "graph|recurrence" $O/lstm_step_wgmma.log | cut -c1-150 | head -20
echo "all done at $(( $(date +%s) - t0 )) s"

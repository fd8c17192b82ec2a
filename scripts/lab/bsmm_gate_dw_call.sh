#!/usr/bin/env bash
# device call (issue 16): bsmm_dw's gate-run kernel (bsmm_sm90_gate_gradient.cu) for nn::LSTM's
# gate layouts, from the bundle build-gpu/lab.tar.xz (carry it; BUNDLE= another; targets gpu_tests
# lstm_step), about 3 minutes:
#   1. its GPU test, every bsmm and block-sparse convolution GPU test (the general dW kernel's
#      barriers moved into a helper, dw_sync, after its last GPU run), and the LSTM GPU tests, all
#      with TESSERA_BSMM_DW_GATE_RUNS=1 (the sparse LSTM layers' dW_h and dW_x then on the gate
#      runs; they are off by default until this call passes);
#   2. lstm_step --profile on the sparse H 4096 layer (1/16, bs 32): the layer and its bsmm_dw
#      nodes, with the gate runs (=1) and without (=0, the default).
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
filter='CudaBsmmTensorCores.*:CudaBsConv.*:LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaModels.*'
TESSERA_BSMM_DW_GATE_RUNS=1 timeout 240 dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $O/tests.log | head
for runs in 1 0; do
  echo "== TESSERA_BSMM_DW_GATE_RUNS=$runs at $(( $(date +%s) - t0 )) s"
  TESSERA_BSMM_DW_GATE_RUNS=$runs timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 5 --warmup 1 \
    --sparse 4096:0.0625:32 --profile >$O/profile_$runs.log 2>&1
  grep -E "bsmm_dw|^tessera sparse graph" $O/profile_$runs.log | grep -v " vs " | cut -c1-120
done
echo "all done at $(( $(date +%s) - t0 )) s"

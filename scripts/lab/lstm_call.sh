#!/usr/bin/env bash
# device call A of the next session (carry build-gpu/next.tar.xz, rebuilt at the streamed-W commit or
# later; kind nvidia-h100-x1 for figures comparable with the last sessions'; about 8 min):
#   1. the GPU tests never run yet: qk_layer_norm, the normalization kernels' row stride, the LSTM
#      recurrence (balanced packing, BA f16 B 7, streamed W: forced on small layers, dense H 2048);
#   2. bench/lstm_step, graph fwd+bwd against cuDNN: dense H 1024 and 2048 (2048 now streams W),
#      the sparse layers of H 2048's parameter count (stream), H 4096 1/16 random and BA;
#   3. streamed W's ring of 2 against 3 (TESSERA_LSTM_STREAM_RING) on the streamed layers;
#   4. TESSERA_LSTM_BALANCE=1 on H 4096 1/16 random.
# lstm_step --profile: each compiled step's time by op (CompiledStep::profile), for the sparse
# layers' "rest of the step" (4.3 ms of 13.2 at H 4096 1/16 bs 32 on 2026-12-03).
set -uo pipefail
O=$OUT; t0=$(date +%s)
rm -rf dist; tar xJf build-gpu/next.tar.xz
timeout 240 dist/run gpu_tests --gtest_filter='CudaQkLayerNorm.*:CudaNorms.*:LstmRecurrenceGpu.*:CudaCompiledStep.*' >$O/tests.log 2>&1
grep -E "OK \]|FAILED|PASSED|Failure|dense H 2048" $O/tests.log | tail -30
echo "== tests at $(( $(date +%s) - t0 )) s"
timeout 300 dist/run lstm_step --hidden 1024,2048 --dtypes bf16 --repeats 5 --warmup 1 --profile \
  --sparse 4096:0.0625:32,4096:0.0625:32:ba,4096:0.25:32,8192:0.0625:32,8192:0.0625:64 --json $O/lstm_step.json \
  >$O/lstm_step.log 2>&1
grep -E "graph|recurrence|plan|not run" $O/lstm_step.log | grep -v "^profile" | cut -c1-160 | head -60
grep -E "^profile (tessera graph|tessera sparse graph)" $O/lstm_step.log | cut -c1-130 | head -60
echo "== lstm_step at $(( $(date +%s) - t0 )) s"
TESSERA_LSTM_STREAM_RING=2 timeout 100 dist/run lstm_step --hidden 2048 --dtypes bf16 --repeats 5 --warmup 1 \
  --sparse 4096:0.25:32,8192:0.0625:32,8192:0.0625:64 >$O/lstm_step_ring2.log 2>&1
grep -E "graph|recurrence|plan" $O/lstm_step_ring2.log | cut -c1-160 | head -30
TESSERA_LSTM_BALANCE=1 timeout 60 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 \
  --sparse 4096:0.0625:32 >$O/lstm_step_bal1.log 2>&1
grep -E "graph|recurrence" $O/lstm_step_bal1.log | cut -c1-160 | head -12
echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# One device call (carry build-gpu/next.tar.xz: gpu_tests, lstm_step, train_lstm, train_transformer; about 8 min;
# 8 files come back: tests.log, lstm_step.log, lstm_step_f32_gates.log, three train_lstm logs, weights.log):
#   1. GPU tests of the changes not yet run on a GPU (2026-12-06): expand's 16-byte word path
#      (CudaShapeOps.Expand*), lstm_recurrence's bias input added in the kernel's epilogue (every
#      LstmRecurrenceGpu case but one has a random bias; the layer test a random bias too), the
#      LSTM layer's fused path under autocast with its input products in bf16 (LstmLayerGpu.*,
#      LstmRecurrenceGpu.LayerFusedPath...), the reductions, bsmm's bias epilogue on every path
#      (CudaBsmmTensorCores.*: the new ForwardWithBiasMatchesTheCpuOnEveryPath and the rest);
#   2. bench/lstm_step --profile, sparse H 4096 1/16 bs 32 random and BA (before: `add` 0.380 ms,
#      `expand` 0.199 ms on the H100), and the random layer again with TESSERA_LSTM_F32_GATES=1
#      (the lab switch: the path before, bias added by an `add` outside the kernel);
#   3. train_lstm as scripts/reproduce.sh lstm runs the sparse and dense models on gcide, 60 s of
#      training each, the sparse one twice: as built and with TESSERA_LSTM_F32_GATES=1 (f32
#      product, f32 bias add, the op's cast, as before), each printing step 30 op by op
#      (--profile-step). tokens/s from the log's last line.
set -uo pipefail
O=$OUT; t0=$(date +%s)
[ -d dist ] || tar xJf build-gpu/next.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader
filter='CudaShapeOps.Expand*:LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaReductions.*:CudaBsmmTensorCores.*'
timeout 300 dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
grep -E "OK \]|FAILED|PASSED|Failure" $O/tests.log | tail -30
echo "== tests at $(( $(date +%s) - t0 )) s"
timeout 150 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 --profile \
  --sparse 4096:0.0625:32,4096:0.0625:32:ba >$O/lstm_step.log 2>&1
grep -E "graph bf16|recurrence (fwd|bwd) bf16" $O/lstm_step.log | grep -v "^profile" | cut -c1-120
grep -E "^profile tessera sparse graph bf16: (expand|add|sum|\(sum\))" $O/lstm_step.log | cut -c1-120
TESSERA_LSTM_F32_GATES=1 timeout 100 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 --profile \
  --sparse 4096:0.0625:32 >$O/lstm_step_f32_gates.log 2>&1
grep -E "sparse graph bf16" $O/lstm_step_f32_gates.log | grep -v "^profile" | cut -c1-120 | sed 's/^/lab f32 gates: /'
grep -E "^profile tessera sparse graph bf16: (add|sum|\(sum\))" $O/lstm_step_f32_gates.log | cut -c1-120
echo "== lstm_step at $(( $(date +%s) - t0 )) s"
export TESSERA_DATA_MIRROR=dist/mirror
data=$(data/fetch.sh gcide) || exit 1
common="--device cuda --data $data --dtype bf16 --batch 64 --seq 256 --steps 100000000 --lr 1e-3 --warmup 0
  --schedule constant --eval-every 100000000 --eval-batches 2 --test-batches 0 --ckpt-every 0 --log-every 100
  --sample-chars 0 --split interleaved --time-limit 60 --profile-step 30"
sparse="--hidden 4096 --block 32 --density 0.0625 --layout random"
run() {  # name, env, model flags
  # shellcheck disable=SC2086
  env $2 timeout 150 dist/run train_lstm $common $3 --out /tmp/$1 >$O/$1.log 2>&1
  echo "== $1: $(grep -E '^step [0-9]+/' $O/$1.log | tail -1 | cut -c1-110)"
  sed -n '/^profile of step/,/(sum)/p' $O/$1.log | head -16
}
run sparse_bf16_gates "TESSERA_LSTM_F32_GATES=0" "$sparse"
run sparse_f32_gates "TESSERA_LSTM_F32_GATES=1" "$sparse"
run dense_cudnn "TESSERA_LSTM_F32_GATES=0" "--hidden 1024 --block 0 --cudnn"
# 4. The weights experiment's two transformers (scripts/reproduce.sh weights: context 1024, batch 32),
#    30 s each, step 20 op by op, and the sparse one again with TESSERA_BSMM_BIAS=0 (the lab switch:
#    the bias added by an f32 `add` after each block-sparse projection, as before 2026-12-06,
#    instead of in bsmm's epilogue). All three logs in $OUT/weights.log.
tcommon="--device cuda --data $data --dtype bf16 --batch 32 --seq 1024 --layers 8 --attn-block 128 --steps 100000000
  --lr 6e-4 --beta2 0.95 --weight-decay 0.1 --qk-norm --warmup 200 --schedule constant --eval-every 100000000
  --eval-batches 2 --test-batches 0 --ckpt-every 0 --log-every 50 --sample-chars 0 --split interleaved
  --time-limit 30 --profile-step 20"
sparse_w="--width 1024 --heads 16 --block 64 --density 0.25"
for m in "dense|--width 512 --heads 8|" "sparse|$sparse_w|" "sparse_bias_after|$sparse_w|TESSERA_BSMM_BIAS=0"; do
  IFS='|' read -r name flags envs <<<"$m"
  # shellcheck disable=SC2086
  env $envs timeout 100 dist/run train_transformer $tcommon $flags --out /tmp/w_$name >/tmp/w_$name.log 2>&1
  { echo "=== $name"; cat /tmp/w_$name.log; } >>$O/weights.log
  echo "== weights $name: $(grep -E '^step [0-9]+/' /tmp/w_$name.log | tail -1 | cut -c1-110)"
  sed -n '/^profile of step/,/(sum)/p' /tmp/w_$name.log | head -14
done
echo "all done at $(( $(date +%s) - t0 )) s"

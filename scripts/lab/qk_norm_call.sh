#!/usr/bin/env bash
# device call B of the next session (carry build-gpu/next.tar.xz; kind nvidia-h100-x1; about 7 min):
# QK-norm's cost with the fused qk_layer_norm op (45 s each, solo, same call: the gcide T 4096
# dense transformer without and with --qk-norm; before the op 0.93M against 0.76M tokens/s on the
# H100), then the attention experiment's dense seed-1 run again (its steps in 240 s change with the
# op): remove docs/results/attention_gcide/{dense,fixed}-s1 first; untar $OUT/runs.tgz into
# docs/results/attention_gcide/ afterwards. fixed-s1 and strided-s1 then: EXP=attention
# MODELS=fixed,strided SEEDS=1 bash scripts/lab/experiment_call.sh (about 8.5 min).
set -uo pipefail
O=$OUT; t0=$(date +%s)
rm -rf dist; tar xJf build-gpu/next.tar.xz
export TESSERA_DATA_MIRROR=dist/mirror
data=$(data/fetch.sh gcide); echo '{"seed": 1}' > /tmp/ms.json
for v in plain qk; do
  flags=""; [ $v = qk ] && flags="--qk-norm"
  timeout 110 dist/run train_transformer --device cuda --data "$data" --out /tmp/t_$v --seed 1 --config /tmp/ms.json \
    --dtype bf16 --batch 8 --seq 4096 --width 512 --layers 8 --heads 8 --attn-block 128 --attn-layout dense \
    --steps 100000 --lr 6e-4 --beta2 0.95 --weight-decay 0.1 --warmup 200 --schedule constant --eval-every 100000 \
    --eval-batches 8 --test-batches 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --split interleaved \
    --time-limit 45 $flags >$O/speed_$v.log 2>&1
  echo "== $v: $(grep tok/s $O/speed_$v.log | tail -1 | cut -c1-100)"
done
echo "== speed at $(( $(date +%s) - t0 )) s"
EXP=attention MODELS=dense SEEDS=1 LIMIT=$(( 590 - ($(date +%s) - t0) )) bash scripts/lab/experiment_call.sh
echo "all done at $(( $(date +%s) - t0 )) s"

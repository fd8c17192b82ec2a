#!/usr/bin/env bash
# One device call (carry build-gpu/next.tar.xz with train_transformer; about 2 minutes): issue 12's
# end-to-end target, the width-1536 transformer (4 layers, 12 heads, context 1024, batch 8, bf16)
# dense against 25%-dense weights in blocks of 64 and 32, 300 steps each on gcide, tokens/s at
# step 300 and between steps 200 and 300, and step 200 by op and by op and shapes (--profile-step),
# to show where the sparse step's remaining time goes (2026-12-06, H100: dense 442k, bs 64 604k = 1.37x, bs 32 466k).
set -uo pipefail
[ -d dist ] || tar xJf build-gpu/next.tar.xz
nvidia-smi --query-gpu=name --format=csv,noheader
export TESSERA_DATA_MIRROR=dist/mirror
data=$(data/fetch.sh gcide) || exit 1
for m in "dense|--block 0" "bs64|--block 64 --density 0.25" "bs32|--block 32 --density 0.25"; do
  IFS='|' read -r name flags <<<"$m"
  # shellcheck disable=SC2086
  timeout 90 dist/run train_transformer --device cuda --data "$data" --split interleaved --dtype bf16 --seq 1024 \
    --width 1536 --layers 4 --heads 12 --batch 8 --steps 300 --eval-every 0 --ckpt-every 0 --log-every 100 \
    --sample-chars 0 --test-batches 0 --profile-step 200 $flags --out /tmp/e2e_$name >$OUT/e2e_$name.log 2>&1
  echo "== $name: $(grep -E '^step (200|300)/' $OUT/e2e_$name.log | cut -c1-80 | tr '\n' ';')"
  sed -n '/^profile of step/,/(sum)/p' $OUT/e2e_$name.log | head -18
  sed -n '/costliest op signatures/,+21p' $OUT/e2e_$name.log | cut -c1-160
done

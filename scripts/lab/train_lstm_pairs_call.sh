#!/usr/bin/env bash
# device call (issue 16): train_lstm's tokens/s for every pair of the table (tinyshakespeare,
# bf16, B 64, T 256, 400 steps, tokens/s and loss at step 400): dense H 1024 (tessera and cuDNN)
# against the sparse layers of its recurrent parameter count (H 2048 at 1/4, H 4096 at 1/16, H 8192
# at 1/64), dense H 2048 (tessera and cuDNN) against those of its count (H 4096 at 1/4, H 8192 at
# 1/16). From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz; target train_lstm), about 4
# minutes; LIMIT=s starts no run after s seconds.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-300}
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
train() {  # NAME ARGS...
  local name=$1; shift
  [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || { echo "$name: not run (LIMIT)"; return; }
  timeout 90 dist/run train_lstm --device cuda --dtype bf16 --batch 64 --seq 256 --steps 400 \
    --data dist/data/input.txt --eval-every 0 --ckpt-every 0 --log-every 100 --sample-chars 0 --out /tmp/tl "$@" \
    >$O/train_$name.log 2>&1
  local rc=$?
  echo "$name rc $rc: $(grep -E '^step 400/' $O/train_$name.log | grep -oE '[0-9]+ tok/s|loss [0-9.]+' | tr '\n' ' ')"
}
train dense1024 --hidden 1024 --block 0
train cudnn1024 --hidden 1024 --block 0 --cudnn
train sparse2048_q --hidden 2048 --block 32 --density 0.25
train sparse4096_16 --hidden 4096 --block 32 --density 0.0625
train sparse8192_64 --hidden 8192 --block 32 --density 0.015625
train dense2048 --hidden 2048 --block 0
train cudnn2048 --hidden 2048 --block 0 --cudnn
train sparse4096_q --hidden 4096 --block 32 --density 0.25
train sparse8192_16 --hidden 8192 --block 32 --density 0.0625
echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# The two-GPU data-parallel run (docs/distributed.md) on a node with 2 GPUs, from a bundle
# (scripts/bundle.sh with dp_scaling and train_transformer among its targets):
#   - the GPUs' link (nvidia-smi topo -m);
#   - 2 ranks against 1 rank on the doubled batch: 50 steps of the nanoGPT model without dropout, bf16;
#   - dp_scaling at world sizes 1 and 2: nanoGPT (B 64 per GPU), GPT-2 small (B 32 and B 4 per GPU);
#   - train_transformer on 2 GPUs through a rendezvous file (dropout on), its checkpoint resumed on
#     one GPU with the doubled batch, against a straight one-GPU run (the loss columns side by side);
#   - the same 2-GPU run with --zero1 (ZeRO-1) against plain data parallelism, and the optimizer
#     state each rank holds.
#
#   scripts/dp_two_gpus.sh [BUNDLE [OUT]]      # defaults: dist, ./dp_two_gpus
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0) in every process it starts.
set -uo pipefail
bundle=${1:-dist}
out=${2:-dp_two_gpus}
mkdir -p "$out"
run="$bundle/run"
export NCCL_NVLS_ENABLE=0 TESSERA_DIST_TIMEOUT_S=${TESSERA_DIST_TIMEOUT_S:-300}
data="$bundle/data/input.txt"
nvidia-smi topo -m | tee "$out/topo.txt"
timeout 240 "$run" dp_scaling --check-steps 50 --world-sizes 2 --batch 32 --json "$out/check.json"
timeout 400 "$run" dp_scaling --models nanogpt,gpt2 --world-sizes 1,2 --batch 64 --gpt2-batch 32 --steps 10 --repeats 5 \
  --json "$out/scaling.json"
timeout 300 "$run" dp_scaling --models gpt2 --world-sizes 1,2 --gpt2-batch 4 --steps 20 --repeats 5 --json "$out/scaling_b4.json"
common=(--device cuda --dtype bf16 --data "$data" --log-every 5 --eval-every 0 --seq 256 --width 384 --layers 6 --heads 6
        --attn-block 64 --schedule constant --warmup 0 --dropout 0.1)
rdv="$out/rendezvous"
rm -rf "$out/two" "$out/one" "$rdv"
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout 200 "$run" train_transformer "${common[@]}" --batch 16 --steps 20 \
    --dist-init "file://$(realpath -m "$rdv")" --out "$out/two" >"$out/two.rank$r.log" 2>&1 &
done
wait
tail -2 "$out/two.rank0.log"
timeout 200 "$run" train_transformer "${common[@]}" --batch 32 --steps 30 --resume "$out/two/ckpt.h5" --out "$out/two" | tail -2
timeout 200 "$run" train_transformer "${common[@]}" --batch 32 --steps 30 --out "$out/one" | tail -2
# step and train_loss of each metrics row (nlohmann writes the keys sorted: "step" before "train_loss")
losses() { sed -n 's/.*"step":\([0-9]*\),.*"train_loss":\([^,}]*\).*/\1 \2/p' "$1/metrics.jsonl" | sort -k1,1; }
echo "step | train_loss: 2 GPUs (steps 1-20), then resumed on 1 GPU | 1 GPU throughout"
join <(losses "$out/two") <(losses "$out/one") | sort -n | tee "$out/losses.txt"
rm -rf "$out/zero" "$out/plain" "$rdv"
for way in zero plain; do
  extra=(); test $way = zero && extra=(--zero1)
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout 200 "$run" train_transformer "${common[@]}" "${extra[@]}" --batch 16 --steps 20 \
      --dist-init "file://$(realpath -m "$rdv")" --out "$out/$way" >"$out/$way.rank$r.log" 2>&1 &
  done
  wait
done
grep -h "ZeRO-1" "$out/zero.rank0.log"
echo "step | train_loss: 2 GPUs ZeRO-1 | 2 GPUs plain data parallelism"
join <(losses "$out/zero") <(losses "$out/plain") | sort -n | tee "$out/losses_zero.txt"

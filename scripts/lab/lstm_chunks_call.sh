#!/usr/bin/env bash
# device call (issue 16): the gate dW's chunks of n against pacing. lstm_switches_call.sh (H100,
# 2026-12-07) found sparse H 8192 at 1/16 faster with 1 chunk paced by 2 steps (19.23 ms) than with
# the 16 chunks the L2 rule gives (20.4); here each layer with the rule's chunks at pace 8 and 2,
# and with 1 chunk at pace 2 and 4, the pair on and off and its column sums on (they need 1 chunk),
# quads on, two rounds interleaved. From the bundle (BUNDLE=, default build-gpu/lab2.tar.xz).
# About 6 minutes; LIMIT=s stops starting runs after s seconds.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-420}
ms() { grep -E "$1" $O/c.log | head -1 | grep -oE 'bs32( [a-z]+)? +[0-9.]+' | awk '{print $NF}'; }
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab2.tar.xz}"; cat dist/BUILD
configs="rule,8 rule,2 1,2 1,2,sums 1,4,sums 1,2,nopair"
for r in 1 2; do
  for layer in 4096:0.0625:32 8192:0.015625:32 8192:0.0625:32; do
    for cfg in $configs; do
      [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 3
      IFS=, read -r chunks pace extra <<<"$cfg"
      vars=(TESSERA_BSMM_QUADS=1 TESSERA_BSMM_DW_PACE=$pace)
      [ $chunks = rule ] || vars+=(TESSERA_BSMM_DW_CHUNKS=$chunks)
      [ "$extra" = sums ] && vars+=(TESSERA_BSMM_DW_PAIR_SUMS=1)
      [ "$extra" = nopair ] && vars+=(TESSERA_BSMM_DW_PAIR=0)
      env "${vars[@]}" timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 \
        --sparse $layer --profile >$O/c.log 2>&1
      echo "$layer $cfg: graph $(ms '^tessera sparse graph') dw $(ms 'profile.*: bsmm_dw ')" \
        "pair $(ms 'profile.*bsmm_dw_pair') col_sum $(ms 'profile.*: col_sum ')"
    done
  done
done
rm -f $O/c.log

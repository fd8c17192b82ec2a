#!/usr/bin/env bash
# device call (issue 16), after lstm_defaults_call.sh on the same warm machine (its dist/ is kept):
# where the sparse layers' graph steps go, op by op, for the three unmet targets (B 64, T 256,
# bf16): H 4096 at 1/16 random against its balanced layout (the gap between them is what the random
# layout loses), H 8192 at 1/64 and H 8192 at 1/16; rows "profile ..." in $OUT/where.log. About 1
# minute. LIMIT=s skips the rest after s seconds.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-200}
[ -x dist/run ] || { B=${BUNDLE:-build-gpu/lab.tar.xz}; tar xJf "$B"; }
for s in 4096:0.0625:32 4096:0.0625:32:balanced 8192:0.015625:32 8192:0.0625:32; do
  [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break
  timeout 90 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 --sparse $s --profile \
    >>$O/where.log 2>&1
  echo "== $s rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "graph|profile" $O/where.log | grep -v " vs \|step-wise\|floor" | tail -n 14 | cut -c1-120
done

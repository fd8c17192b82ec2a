#!/usr/bin/env bash
# device call: issue 20 runs from the bundle build-gpu/next.tar.xz (carry it), packed small:
#   EXP=attention MODELS=fixed,strided SEEDS=1 bash scripts/lab/experiment_call.sh     (two 240 s runs fit one call)
#   EXTRA="--qk-norm --beta2 0.95" EXP=attention ...                   (flags added to every run)
# The run folders stay on a warm machine (results/ is ignored): a later call with the same EXP
# keeps the finished ones. Untar $OUT/runs.tgz into docs/results/<folder> here.
set -uo pipefail
O=$OUT; t0=$(date +%s)
[ -d dist ] || tar xJf build-gpu/next.tar.xz
timeout $(( ${LIMIT:-585} - ($(date +%s) - t0) )) scripts/reproduce.sh "$EXP" --models "$MODELS" --seeds "${SEEDS:-1}" \
  --out "results/$EXP" --pack "$O/runs.tgz" ${EXTRA:+--extra "$EXTRA"} 2>&1 | grep -v "^\s*$" | tail -20
# stopped by the timeout: pack the finished runs anyway
[ -f $O/runs.tgz ] || scripts/reproduce.sh "$EXP" --plot-only --out "results/$EXP" --pack "$O/runs.tgz" 2>&1 | tail -3
ls -la $O; echo "all done at $(( $(date +%s) - t0 )) s"

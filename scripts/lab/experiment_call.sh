#!/usr/bin/env bash
# device call: issue 20 runs from the bundle build-gpu/next.tar.xz (carry it), packed small:
#   EXP=attention MODELS=fixed,strided SEEDS=1 bash scripts/lab/experiment_call.sh     (two 240 s runs fit one call)
#   EXTRA="--qk-norm --beta2 0.95" EXP=attention ...                   (flags added to every run)
#   LIMIT=S: the seconds the call may take (585 by default). Set it below the call's real limit:
#     the device counts holding and copying against the budget, so with 512 s of budget left a
#     call got 398 s. A model whose run (RUN_S, 250 s) no longer fits is not started.
# The models run one at a time, and $OUT/runs.tgz is written again after each, so a call cut
# short still brings back the runs it finished. The run folders stay on a warm machine (results/
# is ignored): a later call with the same EXP keeps the finished ones. Untar $OUT/runs.tgz into
# docs/results/<folder> here.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/next.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
IFS=, read -r -a models <<<"$MODELS"
for m in "${models[@]}"; do
  left=$(( ${LIMIT:-585} - ($(date +%s) - t0) ))
  if (( left < ${RUN_S:-250} )); then echo "experiment_call: $m not started: $left s left"; continue; fi
  timeout "$left" scripts/reproduce.sh "$EXP" --models "$m" --seeds "${SEEDS:-1}" --out "results/$EXP" \
    --pack "$O/runs.tgz" ${EXTRA:+--extra "$EXTRA"} 2>&1 | grep -v "^\s*$" | tail -8
done
# the table of every finished run, and the pack if no model finished in this call
scripts/reproduce.sh "$EXP" --plot-only --out "results/$EXP" --pack "$O/runs.tgz" 2>&1 | tail -12
ls -la $O; echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# device call (issue 16): the gate dW's chunks of n by the waves they make (docs/lstm_gpu.md, "Tenth
# run"): the random sparse H 4096 layer at 1/16 (173 and 184 gate runs on 132 SMs: two waves, the
# second mostly idle) and H 8192 at 1/64 (259 runs) with TESSERA_BSMM_DW_CHUNKS=1, 2, 3, 4 and
# waves (the lab's rule: kernels/common/work_waves.h; 3 and 2 chunks for the two H 4096 masks, 1 at
# H 8192 1/64), twice interleaved: graph step and the three bsmm_dw of the profile. The waves say
# 2 and 4 chunks take 1.5 run-times where 1 takes 2 at H 4096, 3 chunks 4/3 for 173 runs. If
# `waves` wins, make it the default (gate_chunks in bsmm_sm90_gate_gradient.cu). From the bundle
# (BUNDLE=, default build-gpu/lab.tar.xz; targets gpu_tests lstm_step), or the dist/ a warm machine
# kept with KEEP=1. About 1-2 minutes, the gate dW's GPU tests first; LIMIT=s stops starting runs
# after s seconds.
set -uo pipefail
O=$OUT; t0=$(date +%s); LIMIT=${LIMIT:-150}
[ "${KEEP:-0}" = 1 ] && [ -x dist/run ] || { rm -rf dist; tar xJf "${BUNDLE:-build-gpu/lab.tar.xz}"; }
# first the gate dW's GPU tests (the chunk cases, waves among them)
timeout 60 dist/run gpu_tests --gtest_filter='CudaBsmmTensorCores.GateLayout*' >$O/tests.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "Failure" -A3 $O/tests.log | head -12
for r in 1 2; do
  for layer in 4096:0.0625:32 8192:0.015625:32; do
    for c in 1 2 3 4 waves; do
      [ $(( $(date +%s) - t0 )) -lt $LIMIT ] || break 3
      TESSERA_BSMM_DW_CHUNKS=$c timeout 40 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 \
        --sparse $layer --profile >$O/c.log 2>&1
      ms() { grep -E "$1" $O/c.log | head -1 | grep -oE 'bs32 +[0-9.]+' | awk '{print $2}'; }
      echo "$layer chunks $c: graph $(ms '^tessera sparse graph') dW $(ms 'profile.*bsmm_dw')"
    done
  done
done
rm -f $O/c.log

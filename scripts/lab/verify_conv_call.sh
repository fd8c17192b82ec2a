#!/usr/bin/env bash
# device call (issue 19): main's convolution code checked and timed in one short call, from the bundle
# (BUNDLE=, default build-gpu/conv.tar.xz; targets gpu_tests bsconv_gpu): the convolution GPU tests,
# then bsconv_gpu at density 0.25 (both shapes, bs 32 and 64). About a minute on an H100.
set -uo pipefail
O=$OUT; t0=$(date +%s)
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/conv.tar.xz}"; cat dist/BUILD
timeout 200 dist/run gpu_tests --gtest_filter='CudaBsConv.*:CudaEdgeBias.*:CudaConvLayers.*' >$O/tests_conv.log 2>&1
echo "conv tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests_conv.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $O/tests_conv.log | head -12
timeout 120 dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 --block-sizes 32,64 --densities 0.25 --repeats 8 \
  --json $O/bsconv.json >$O/bsconv.log 2>&1
echo "== bsconv rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^(fwd|dgrad|wgrad)" $O/bsconv.log | cut -c1-100

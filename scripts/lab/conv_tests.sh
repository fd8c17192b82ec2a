# Sourced by the convolution device calls (verify_conv_call.sh, dw_parts_call.sh): unpacks the bundle
# (BUNDLE=, default build-gpu/conv.tar.xz) and runs the convolution GPU tests into $LOG, a line of their
# result and their failures on stdout. Sets O ($OUT), t0 (the start) and LOG ($OUT/conv.log).
O=$OUT; t0=$(date +%s); LOG=$O/conv.log
rm -rf dist; tar xJf "${BUNDLE:-build-gpu/conv.tar.xz}"; cat dist/BUILD
timeout 200 dist/run gpu_tests --gtest_filter='CudaBsConv.*:CudaEdgeBias.*:CudaConvLayers.*' >$LOG 2>&1
echo "conv tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $LOG | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $LOG | head -12

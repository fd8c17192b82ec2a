#!/usr/bin/env bash
# device call (issue 16): what was built after the eighth run, from the bundle build-gpu/lab.tar.xz
# (carry it; BUNDLE= another; targets gpu_tests lstm_step train_lstm), about 3 minutes:
#   1. the streamed forms' test (LstmRecurrenceGpu.WgmmaSparseStreamedMatchesTheCpu: the backward's
#      streamed form now also with gate boxes, a mask entry's four W blocks beside its four boxes;
#      if it passes and is faster, make `streamed` the behaviour of 1 in sparse_gate_boxes_streamed);
#   2. sparse H 8192 at 1/16 (the streamed forms' layer) with gate boxes in the streamed form
#      (TESSERA_LSTM_SPARSE_GATE_BOXES=streamed) and without (1, the default: one box a copy there,
#      32.9 µs a backward step on the H100),
#      --profile, against cuDNN's dense H 2048;
#   3. every LSTM, bsmm and block-sparse convolution GPU test under the defaults (with the gate dW's
#      chunks test in CudaBsmmTensorCores.GateLayoutWeightGradientMatchesTheCpu);
#   3b. the gate dW with n cut into chunks (TESSERA_BSMM_DW_CHUNKS=1, 4, 8, 16; lab), profiled on
#      sparse H 4096 at 1/16 and H 8192 at 1/16 (the `bsmm_dw` rows: 1.54 and 6.08 ms with 1);
#   3c. issue 19: bsconv_gpu's fwd and dgrad with the halo kernel's entry mode
#      (TESSERA_BSCONV_HALO_ENTRY=1: one barrier wait and release per list entry, not per tap) and without;
#   4. ncu of the gate-run dW kernel on sparse H 8192 at 1/16 (one launch: DRAM bytes, L2 hit rate),
#      the 6.1 ms of that layer's 22.0 that the next lever (a dW schedule keeping X's strips in L2)
#      is for.
set -uo pipefail
O=$OUT; t0=$(date +%s)
B=${BUNDLE:-build-gpu/lab.tar.xz}; rm -rf dist; tar xJf "$B"  # always this bundle (a warm machine keeps the last dist)
cat dist/BUILD
timeout 150 dist/run gpu_tests --gtest_filter='LstmRecurrenceGpu.WgmmaSparseStreamed*' >$O/streamed_test.log 2>&1
echo "streamed test rc $?: $(grep -E '^\[  (PASSED|FAILED)' $O/streamed_test.log | tr '\n' ' ')"
grep -E "Failure" -A 4 $O/streamed_test.log | head -12
for boxes in streamed 1; do
  TESSERA_LSTM_SPARSE_GATE_BOXES=$boxes timeout 90 dist/run lstm_step --hidden 2048 --dtypes bf16 --repeats 3 \
    --warmup 1 --sparse 8192:0.0625:32 --profile >$O/step_$boxes.log 2>&1
  echo "== sparse H 8192 1/16, gate boxes $boxes rc $?"
  grep -E "^(tessera|cudnn) (sparse )?graph|wgmma bf16 +B64 T256 H8192" $O/step_$boxes.log | cut -c1-100
  grep -E "^profile tessera sparse graph bf16: [a-z_]+ \(" $O/step_$boxes.log | cut -c1-100 | head -5
done
filter='LstmRecurrenceGpu.*:LstmLayerGpu.*:CudaLstm*.*:CudaModels.*:CudaBsmmTensorCores.*:CudaBsConv.*'
timeout 240 dist/run gpu_tests --gtest_filter="$filter" >$O/tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $O/tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $O/tests.log | head -8
for entry in 0 1; do  # issue 19: the halo kernel's entry mode (a list entry's taps under one barrier)
  TESSERA_BSCONV_HALO_ENTRY=$entry timeout 150 dist/run bsconv_gpu --shapes n64h56c256,n32h28c512 \
    --block-sizes 16,32,64 --densities 0.25 --repeats 10 >$O/conv_$entry.log 2>&1
  echo "== bsconv, halo entry mode $entry rc $?"; grep -E "fwd|dgrad" $O/conv_$entry.log | cut -c1-110
done
for depth in 3; do for entry in 0 1; do  # tall tiles' three A buffers (bs 16, 32)
  TESSERA_BSCONV_HALO_DEPTH=$depth TESSERA_BSCONV_HALO_ENTRY=$entry timeout 100 dist/run bsconv_gpu \
    --shapes n64h56c256,n32h28c512 --block-sizes 16,32 --densities 0.25 --repeats 10 >$O/conv_d$entry.log 2>&1
  echo "== bsconv, A depth $depth, entry mode $entry rc $?"; grep -E "fwd|dgrad" $O/conv_d$entry.log | cut -c1-110
done; done
TESSERA_BSCONV_HALO_ENTRY=1 timeout 100 dist/run bsconv_gpu --shapes n64h56c256 --block-sizes 32,64 --densities 0.25 \
  --halo-a ss --repeats 10 >$O/conv_ss.log 2>&1
echo "== bsconv, halo entry mode 1, A from shared memory, rc $?"; grep -E "fwd|dgrad" $O/conv_ss.log | cut -c1-110
for layer in 4096:0.0625:32 8192:0.0625:32; do
  for chunks in 1 4 8 16; do
    TESSERA_BSMM_DW_CHUNKS=$chunks timeout 60 dist/run lstm_step --hidden 0 --dtypes bf16 --repeats 2 --warmup 1 \
      --sparse $layer --profile >$O/chunks_${layer%%:*}_$chunks.log 2>&1
    echo "== $layer, dW chunks $chunks rc $?: $(grep -E '^profile tessera sparse graph bf16: bsmm_dw ' \
      $O/chunks_${layer%%:*}_$chunks.log | grep -oE ' [0-9]+\.[0-9]+ ' | head -1) ms dW;" \
      "$(grep -E '^tessera sparse graph' $O/chunks_${layer%%:*}_$chunks.log | grep -oE '[0-9]+\.[0-9]+ ms')"
  done
done
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
timeout 150 ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:gate_gradient_kernel" \
  --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis -o "$O/dw8192" \
  dist/bin/lstm_step --hidden 0 --dtypes bf16 --repeats 1 --warmup 0 --sparse 8192:0.0625:32 >"$O/dw8192.log" 2>&1
echo "ncu dW rc $? at $(( $(date +%s) - t0 )) s"
ncu -i "$O/dw8192.ncu-rep" --page details >"$O/dw8192.txt" 2>&1 || true
grep -E "Duration|DRAM Throughput|L2 Hit Rate|dram__bytes|Memory Throughput" "$O/dw8192.txt" | head -8
rm -f "$O"/*.ncu-rep
echo "all done at $(( $(date +%s) - t0 )) s"

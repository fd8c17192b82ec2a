#!/usr/bin/env bash
# The block-sparse convolution on one GPU (docs/convolution.md), from a bundle (scripts/bundle.sh
# with gpu_tests, kernels_tests, bsconv_gpu and train_conv among its targets):
#   - the GPU tests of the convolution ops (the scalar and the tensor-core kernels, cuDNN's
#     convolution as the all-blocks reference) and the CPU replay of the kernels' tiles;
#   - bench/bsconv_gpu against cuDNN: the tensor-core kernels with halo boxes, with per-tap
#     copies (--halo off), their sm_80 form (the A100 path), and the scalar kernels (one shape);
#   - train_conv's tokens/s and val loss on tinyshakespeare, bf16: dense width 128 against
#     block-sparse width 256 at density 0.25 (equal filter parameters) and dense width 136, three
#     seeds each, the recipe of the CPU comparison, on the tensor-core kernels.
#
#   scripts/conv_gpu.sh [BUNDLE [OUT [PART]]]   # defaults: dist, ./conv_gpu, all
# PART: tests, bench, train or all (each part's commands fit one device call of 600 s even when
# every one of them runs into its timeout: the tests 330 s, the benchmark 450 s, training 540 s);
# profile (not in all): ncu's tensor-pipe activity, throughputs and stall reasons of the forward
# halo kernel (bs 32, density 0.25, N 64 × 56 × 56), 150 s; rows (not in all): the halo kernel's
# tall 512-row tiles against 256-row ones at bs 32 (TESSERA_BSCONV_HALO_ROWS), 200 s.
set -uo pipefail
bundle=${1:-dist}
out=${2:-conv_gpu}
part=${3:-all}
mkdir -p "$out"
run="$bundle/run"
data="$bundle/data/input.txt"
if [[ $part == tests || $part == all ]]; then
  timeout 30 "$run" kernels_tests --gtest_filter='ConvTiles*' 2>&1 | tail -3 | tee "$out/tiles.log"
  # the log shows the test that was running if a kernel hangs
  timeout 300 "$run" gpu_tests --gtest_filter='CudaBsConv*:CudaEdgeBias*:CudaConvLayers*' >"$out/gpu_tests.log" 2>&1
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests? ran|Failure" "$out/gpu_tests.log" | head -40
fi
if [[ $part == bench || $part == all ]]; then
  timeout 150 "$run" bsconv_gpu --json "$out/bench_tc.json" | tee "$out/bench_tc.txt"
  timeout 100 "$run" bsconv_gpu --halo off --json "$out/bench_tc_nohalo.json" | tee "$out/bench_tc_nohalo.txt"
  timeout 100 "$run" bsconv_gpu --path sm80 --block-sizes 32 --densities 0.25,1 --json "$out/bench_sm80.json" \
    | tee "$out/bench_sm80.txt"
  timeout 100 "$run" bsconv_gpu --path scalar --shapes n32h28c512 --block-sizes 32 --densities 0.25 --repeats 3 \
    --json "$out/bench_scalar.json" | tee "$out/bench_scalar.txt"
fi
if [[ $part == rows ]]; then
  for rows in 256 512; do
    timeout 100 "$run" bsconv_gpu --halo-rows $rows --block-sizes 32 --densities 0.25,1 \
      --json "$out/bench_rows$rows.json" | tee "$out/bench_rows$rows.txt"
  done
  exit 0
fi
if [[ $part == profile ]]; then
  metrics="regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
  metrics+=",sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
  metrics+=",sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed"
  metrics+=",lts__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warps_active.avg.per_cycle_active"
  # ncu wraps the program itself (dist/run only sets the library path)
  LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu" timeout 150 ncu --clock-control none \
    --kernel-name regex:halo_kernel --launch-count 1 --metrics "$metrics" "$bundle/bin/bsconv_gpu" \
    --shapes n64h56c256 --block-sizes 32 --densities 0.25 --repeats 1 >"$out/ncu_halo.txt" 2>&1
  grep -E "stalled|hmma|duration|throughput|warps_active" "$out/ncu_halo.txt"
  exit 0
fi
[[ $part == train || $part == all ]] || exit 0
for model in "dense:--width 128" "sparse:--width 256 --density 0.25" "dense136:--width 136 --block 8"; do
  name=${model%%:*}
  flags=${model#*:}
  for seed in 0 1 2; do
    echo "{\"seed\": $seed}" >"$out/seed$seed.json"
    # shellcheck disable=SC2086  # flags is a word list
    timeout 60 "$run" train_conv --device cuda --dtype bf16 --data "$data" --steps 600 \
      --eval-every 600 --seed $((seed == 0 ? 1 : seed)) --config "$out/seed$seed.json" $flags \
      --out "$out/$name.s$seed" >"$out/$name.s$seed.log" 2>&1
    echo "$name seed $seed: $(tail -2 "$out/$name.s$seed.log" | tr "\n" " ")"
  done
done

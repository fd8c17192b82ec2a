#!/usr/bin/env bash
# One device call (carry build-gpu/next.tar.xz with gpu_tests and lstm_step; about 2 min on 2026-12-06):
#   1. GPU tests: the reductions (CudaReductions) and the recurrence (LstmRecurrenceGpu);
#   2. bench/lstm_step --profile on H 4096 1/16 bs 32, random and Barabási–Albert: each compiled
#      step's time by op (the bias gradient's column sum, the recurrences per step);
#   3. ncu source counters of the sparse forward kernel (random, BA) and the BA backward, one launch
#      each: warp stall samples per SASS instruction ($OUT/ncu.tgz: the reports and their CSVs).
# PART=prof runs step 3 alone; PART=split times the BA forward under forced part sizes. docs/lstm_gpu.md reads the samples by region (grid barrier, epilogue).
set -uo pipefail
O=$OUT; t0=$(date +%s)
[ -d dist ] || tar xJf build-gpu/next.tar.xz
if [ "${PART:-all}" = all ]; then
timeout 240 dist/run gpu_tests --gtest_filter='CudaReductions.*:LstmRecurrenceGpu.*' >$O/tests.log 2>&1
grep -E "OK \]|FAILED|PASSED|Failure" $O/tests.log | tail -20
echo "== tests at $(( $(date +%s) - t0 )) s"
timeout 150 dist/run lstm_step --hidden 1024 --dtypes bf16 --repeats 5 --warmup 1 --profile \
  --sparse 4096:0.0625:32,4096:0.0625:32:ba --json $O/lstm_step.json >$O/lstm_step.log 2>&1
grep -E "graph|recurrence|plan|not run" $O/lstm_step.log | grep -v "^profile" | cut -c1-160 | head -30
grep -E "^profile tessera sparse graph" $O/lstm_step.log | cut -c1-130 | head -40
echo "== lstm_step at $(( $(date +%s) - t0 )) s"
fi
if [ "${PART:-all}" = split ]; then
  # the BA forward's packing trade-off: parts of at most n chunks (planner counts, forward: n 12 ->
  # busiest 12 chunks, 22 blocks of two groups; 16 -> 16, 7; 19 -> 17, 6; 25 -> 24, 1; 30 -> 26, 0)
  for n in 12 16 19 25 30; do
    echo "== split $n: $(TESSERA_LSTM_SPLIT_CHUNKS=$n timeout 60 dist/run lstm_step --hidden 1024 --dtypes bf16 \
      --repeats 5 --warmup 1 --sparse 4096:0.0625:32:ba 2>&1 | grep -E "recurrence fwd bf16 +B64 T256 H4096" | cut -c1-100)"
  done
  exit 0
fi
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu"
prof() {  # name layer direction
  timeout 120 ncu --clock-control none --kernel-name-base demangled \
    --kernel-name "regex:lstm_persistent_kernel<__nv_bfloat16, \(int\)32, \(bool\)$3, \(int\)1, \(bool\)0>" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section LaunchStats --section SpeedOfLight \
    -o $O/$1 dist/bin/lstm_step --hidden 1024 --dtypes bf16 --repeats 1 --warmup 0 --sparse $2 >$O/$1.log 2>&1
  tail -3 $O/$1.log
  ncu -i $O/$1.ncu-rep --page source --csv --print-source sass >$O/$1.sass.csv 2>&1 || true
  ncu -i $O/$1.ncu-rep --page source --csv --print-source cuda >$O/$1.src.csv 2>&1 || true
  ls -la $O/$1.*; head -c 600 $O/$1.src.csv; echo
  echo "== $1 at $(( $(date +%s) - t0 )) s"
}
prof rand_fwd 4096:0.0625:32 0
prof ba_fwd 4096:0.0625:32:ba 0
prof ba_bwd 4096:0.0625:32:ba 1
cd $O && tar czf ncu.tgz *.ncu-rep *.csv *_fwd.log *_bwd.log; rm -f *.ncu-rep *.csv *_fwd.log *_bwd.log
echo "all done at $(( $(date +%s) - t0 )) s"

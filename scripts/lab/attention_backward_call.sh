#!/usr/bin/env bash
# device call (issue 13): the attention kernels' variants side by side, from the bundle
# build-gpu/lab.tar.xz (carry it; targets gpu_tests attention_gpu). A variant is a value of a lab
# switch that the kernel files read while variants are compared: V sets TESSERA_ATTENTION_BWD=V,
# "fwd:V" TESSERA_ATTENTION_FWD=V, "both:V" both, "path:V" TESSERA_ATTENTION_PATH=V (sm80,
# sm80-forward, sm80-backward: the mma.sync kernels); "default" leaves them unset. The lab
# switches live only while their variants are compared (none is read now).
#   TEST_VARIANTS="v ..."   the attention GPU tests (FILTER: another gtest filter, '*' for all), under
#                           the default and under each of these
#   VARIANTS="v ..."        attention_gpu (SHAPES, LAYOUTS, HEAD_DIMS: 64) for each, in this order
#   NO_TORCH=1              skips PyTorch's SDPA and FlexAttention on the same shapes
#   NCU="v ..."             ncu: occupancy and duration of the sm_90a kernels at b8h16t4096, dense
# Everything goes to $OUT/lab.txt; a digest is printed.
set -uo pipefail
t0=$(date +%s); L=$OUT/lab.txt
rm -rf dist; tar xJf build-gpu/lab.tar.xz; cat dist/BUILD | tee $L
ATTENTION_TESTS='CudaFlashAttention.*:CudaAttentionPacked.*:CudaBlockAttention.*:CudaAttentionDensePath.*'
F=${FILTER:-$ATTENTION_TESTS:CudaAttentionDropout.*}
# A variant "fwd:V" sets TESSERA_ATTENTION_FWD=V, "both:V" both switches, else TESSERA_ATTENTION_BWD.
with() {
  local v=$1; shift
  case $v in
    default) env -u TESSERA_ATTENTION_BWD -u TESSERA_ATTENTION_FWD -u TESSERA_ATTENTION_PATH "$@" ;;
    fwd:*) TESSERA_ATTENTION_FWD=${v#fwd:} "$@" ;;
    both:*) TESSERA_ATTENTION_FWD=${v#both:} TESSERA_ATTENTION_BWD=${v#both:} "$@" ;;
    path:*) TESSERA_ATTENTION_PATH=${v#path:} "$@" ;;
    *) TESSERA_ATTENTION_BWD=$v "$@" ;;
  esac
}
for v in default ${TEST_VARIANTS:-}; do
  with $v timeout ${TEST_TIMEOUT:-200} dist/run gpu_tests --gtest_filter="$F" > $OUT/t.txt 2>&1
  echo "tests $v rc $?: $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.txt | tr '\n' ' ')"; cat $OUT/t.txt >> $L
done
rm -f $OUT/t.txt
SH=${SHAPES:-b8h16t4096,b16h12t1024}; LA=${LAYOUTS:-dense,local,strided}
for v in ${VARIANTS:-default}; do
  echo "== variant $v" | tee -a $L
  with $v timeout 120 dist/run attention_gpu --shapes $SH --head-dims ${HEAD_DIMS:-64} --layouts $LA --repeats 10 \
    > $OUT/a.txt 2>&1
  cat $OUT/a.txt >> $L; grep -E "fwd\+bwd  " $OUT/a.txt | cut -c1-70
done
rm -f $OUT/a.txt
if [ -z "${NO_TORCH:-}" ]; then
  echo "== PyTorch" | tee -a $L
  timeout 150 python3 bench/attention_torch.py --shapes $SH --head-dims ${HEAD_DIMS:-64} --layouts $LA \
    --repeats 10 2>&1 \
    | tee -a $L | tail -12
fi
for v in ${NCU:-}; do
  echo "== ncu $v" | tee -a $L
  with $v timeout 120 ncu --clock-control none --target-processes all \
    --kernel-name regex:'flash_forward|dq_|dkdv|row_dot' \
    -c 4 --section Occupancy --section LaunchStats --metrics gpu__time_duration.sum dist/run attention_gpu \
    --shapes b8h16t4096 --head-dims 64 --layouts dense --repeats 1 > $OUT/n.txt 2>&1
  cat $OUT/n.txt >> $L
  grep -E "^  [a-z].*\(|Registers Per|Block Limit Reg|Achieved Occ|gpu__time_duration" $OUT/n.txt | cut -c1-90
  rm -f $OUT/n.txt
done
echo "all done at $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# device call (issue 19): the convolution dW kernels' parts of the tiles swept, to fit the parts rule
# (conv_tiles.h's conv_dw_parts) to measurements. From the bundle (BUNDLE=, default build-gpu/conv.tar.xz;
# targets gpu_tests bsconv_gpu):
#   1. the convolution GPU tests;
#   2. bsconv_gpu at the defaults: both shapes, bs 32 and 64, densities 0.25, 0.5 and 1 ($OUT/bsconv.json);
#   3. the dW at every count of parts in PARTS (bsconv_gpu --dw-parts; 0 is the rule's choice): bs 32 in the
#      strip form, bs 64, and bs 32 on the halo dW kernel (--dw-strip off), densities 0.25, 0.5 and 1.
# The logs go to $OUT/conv.log; stdout has a line per (shape, bs, density): the ms at each count. About 2
# minutes on an H100.
set -uo pipefail
source "$(dirname "$0")/conv_tests.sh"  # the bundle unpacked, the convolution GPU tests
SHAPES=n64h56c256,n32h28c512
echo "== bsconv defaults" >>$LOG
timeout 150 dist/run bsconv_gpu --shapes $SHAPES --block-sizes 32,64 --densities 0.25,0.5,1 --repeats 10 \
  --json $O/bsconv.json >>$LOG 2>&1
echo "== defaults rc $? at $(( $(date +%s) - t0 )) s (ms, useful-frac = the last column)"
sed -n '/^== bsconv defaults$/,$p' $LOG | grep -E "^(fwd|dgrad|wgrad)" | awk '{print $1, $3, $4, $5, $6, $NF}'
PARTS=${PARTS:-0,1,2,3,4,6,8,11,16,24,32}
sweep() {  # NAME ARGS...: the dW's rows of a sweep, a line per (shape, bs, density)
  local name=$1; shift
  echo "== sweep $name" >>$LOG
  timeout 200 dist/run bsconv_gpu --shapes $SHAPES --densities 0.25,0.5,1 --dw-parts $PARTS --repeats 5 "$@" \
    >>$LOG 2>&1
  echo "== sweep $name rc $? at $(( $(date +%s) - t0 )) s"
  sed -n "/^== sweep $name\$/,\$p" $LOG | grep -E "^wgrad .* bs[0-9]" |
    awk '{key=$3" "$4" "$5; n=($6=="parts")?$7:"rule"; ms=($6=="parts")?$8:$6;
          if (key!=last) {if (last!="") print line; line=key":"; last=key} line=line" "n"="ms} END {print line}'
}
sweep strip --block-sizes 32
sweep bs64 --block-sizes 64
sweep halo32 --block-sizes 32 --dw-strip off
echo "all done at $(( $(date +%s) - t0 )) s"

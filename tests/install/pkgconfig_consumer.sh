#!/usr/bin/env bash
# pkg-config on an install: compiles and links tests/install/consumer/main.cpp by hand,
#   $CXX main.cpp -o consumer $(pkg-config --cflags --libs tessera)
# with PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig and no -D flag of its own (the Cflags must have
# none either), runs it, and checks that it saw TESSERA_WITH_CUDA / TESSERA_HAVE_CUDNN exactly
# as the library was built (through tessera/build_config.h alone).
#
#   pkgconfig_consumer.sh PREFIX LIBDIR WORK_DIR SOURCE CXX EXPECT_CUDA EXPECT_CUDNN
#
# Exit 77 (ctest: skipped) when pkg-config is not installed (scripts/deps.sh installs it).
set -euo pipefail
prefix=$1 libdir=$2 work=$3 source=$4 cxx=$5 expect_cuda=$6 expect_cudnn=$7

if ! command -v pkg-config >/dev/null; then
  echo "SKIP: pkg-config is not installed (apt-get install pkg-config, or scripts/deps.sh)"
  exit 77
fi
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
pkg-config --exists --print-errors tessera
echo "tessera $(pkg-config --modversion tessera) from $PKG_CONFIG_PATH/tessera.pc"
cflags=$(pkg-config --cflags tessera)
libs=$(pkg-config --libs tessera)
echo "Cflags: $cflags"
echo "Libs:   $libs"
for f in $cflags; do
  case $f in
  -D*) echo "FAIL: tessera.pc's Cflags has $f (the switches belong in tessera/build_config.h)"; exit 1 ;;
  esac
done

rm -rf "$work" && mkdir -p "$work"
# shellcheck disable=SC2086  # the flags are meant to split
(set -x; "$cxx" "$source" -o "$work/consumer" $cflags $libs)
# A shared libtessera is found in the prefix (an installed one has no rpath to it).
rc=0
out=$(LD_LIBRARY_PATH="$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/consumer") || rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: the consumer exited with $rc"; exit 1; }
grep -qx "TESSERA_WITH_CUDA=$expect_cuda" <<<"$out" ||
  { echo "FAIL: the library was built with TESSERA_WITH_CUDA=$expect_cuda, the program saw otherwise"; exit 1; }
grep -qx "TESSERA_HAVE_CUDNN=$expect_cudnn" <<<"$out" ||
  { echo "FAIL: the library was built with TESSERA_HAVE_CUDNN=$expect_cudnn, the program saw otherwise"; exit 1; }
echo "ok: compiled by hand with pkg-config; it sees TESSERA_WITH_CUDA=$expect_cuda TESSERA_HAVE_CUDNN=$expect_cudnn, as built"

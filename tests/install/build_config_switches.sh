#!/usr/bin/env bash
# The build's switches for programs compiled by hand (core/build_config.h.in): a program that
# defines TESSERA_WITH_CUDA or TESSERA_HAVE_CUDNN itself, against a tessera built without it,
# must stop at the #error in tessera/build_config.h, which names the switch; one that defines a
# switch the library has must compile (it agrees with the library). Plain $CXX -fsyntax-only,
# -I paths only.
#
#   build_config_switches.sh PREFIX WORK_DIR CXX BUILT_CUDA BUILT_CUDNN TEMPLATE
#
# 1. Against the install in PREFIX, through <tessera/tessera.h> (core/op.h, core/device.h include
#    the header). The #error can be hit only for a switch this build lacks: a build with both CUDA
#    and cuDNN has none, and the run says so.
# 2. Against build_config.h configured from TEMPLATE (core/build_config.h.in) with the switches
#    off (and CUDA on, cuDNN off), whatever this build has: the #error of every switch is checked.
set -euo pipefail
prefix=$1 work=$2 cxx=$3 built_cuda=$4 built_cudnn=$5 template=$6
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# compile NAME SOURCE_TEXT FLAGS...: 0 when it compiles; the compiler's messages in $work/NAME.log
compile() {
  local name=$1 text=$2; shift 2
  printf '%s\n' "$text" >"$work/$name.cpp"
  "$cxx" -std=c++17 -fsyntax-only "$@" "$work/$name.cpp" >"$work/$name.log" 2>&1
}
message_of() {  # the #error's text for a switch
  case $1 in
  TESSERA_WITH_CUDA) echo "TESSERA_WITH_CUDA is defined, but this tessera was built without CUDA" ;;
  TESSERA_HAVE_CUDNN) echo "TESSERA_HAVE_CUDNN is defined, but this tessera was built without cuDNN" ;;
  esac
}
# expect_error NAME SWITCH SOURCE_TEXT FLAGS...: compiling with -DSWITCH=1 stops at its #error
expect_error() {
  local name=$1 switch=$2 text=$3; shift 3
  if compile "$name" "$text" "-D$switch=1" "$@"; then
    fail "$name: -D$switch=1 compiled; expected the #error"
  elif grep -qF "$(message_of "$switch")" "$work/$name.log"; then
    echo "ok   $name: -D$switch=1 stops at: $(message_of "$switch")"
  else
    fail "$name: -D$switch=1 failed, but not with the #error:"; sed -n 1,20p "$work/$name.log"
  fi
}
expect_ok() {  # expect_ok NAME WHY SOURCE_TEXT FLAGS...
  local name=$1 why=$2 text=$3; shift 3
  if compile "$name" "$text" "$@"; then
    echo "ok   $name: $why"
  else
    fail "$name: $why: did not compile:"; sed -n 1,20p "$work/$name.log"
  fi
}

# ---- 1. the install ----
echo "the install in $prefix: built with TESSERA_WITH_CUDA=$built_cuda TESSERA_HAVE_CUDNN=$built_cudnn"
inc=(-I"$prefix/include" -I"$prefix/include/tessera")
program='#include <tessera/tessera.h>
int main() { return 0; }'
expect_ok install_plain "no -D flags" "$program" "${inc[@]}"
unchecked=()
for switch in TESSERA_WITH_CUDA TESSERA_HAVE_CUDNN; do
  if [ "$switch" = TESSERA_WITH_CUDA ]; then built=$built_cuda; else built=$built_cudnn; fi
  if [ "$built" = 1 ]; then
    expect_ok "install_$switch" "-D$switch=1 agrees with the library (built with it)" "$program" "-D$switch=1" "${inc[@]}"
    unchecked+=("$switch")
  else
    expect_error "install_$switch" "$switch" "$program" "${inc[@]}"
  fi
done
if ((${#unchecked[@]})); then
  echo "note: this build has ${unchecked[*]}: its #error cannot be hit against this install (a build without" \
       "it can); checked below against the header template only"
fi

# ---- 2. the header template, switches off ----
# config CUDA CUDNN: tessera/build_config.h configured from the template, in $work/include-CUDA-CUDNN
config() {
  local dir="$work/include-$1-$2/tessera"
  mkdir -p "$dir"
  sed -e "s/@TESSERA_BUILT_WITH_CUDA@/$1/" -e "s/@TESSERA_BUILT_WITH_CUDNN@/$2/" "$template" >"$dir/build_config.h"
  echo "-I$work/include-$1-$2"
}
probe='#include <tessera/build_config.h>
int main() { return 0; }'
sees_cuda='#include <tessera/build_config.h>
#ifndef TESSERA_WITH_CUDA
#error "a build with CUDA: tessera/build_config.h did not define TESSERA_WITH_CUDA"
#endif
int main() { return 0; }'
sees_none='#include <tessera/build_config.h>
#if defined(TESSERA_WITH_CUDA) || defined(TESSERA_HAVE_CUDNN)
#error "a build without CUDA: tessera/build_config.h defined a switch"
#endif
int main() { return 0; }'
off=$(config 0 0)
expect_ok template_cpu_plain "CPU-only template, no -D flags: no switch defined" "$sees_none" "$off"
expect_error template_cpu_cuda TESSERA_WITH_CUDA "$probe" "$off"
expect_error template_cpu_cudnn TESSERA_HAVE_CUDNN "$probe" "$off"
cuda=$(config 1 0)
expect_ok template_cuda_plain "CUDA-without-cuDNN template, no -D flags: TESSERA_WITH_CUDA defined" "$sees_cuda" "$cuda"
expect_error template_cuda_cudnn TESSERA_HAVE_CUDNN "$probe" "$cuda"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"

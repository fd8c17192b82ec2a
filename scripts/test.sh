#!/usr/bin/env bash
# The test command: install what is missing, configure, build, run every test with ctest.
#
#   scripts/test.sh            # build in ./build (TESSERA_BUILD_DIR overrides), run ctest
#
# CUDA code is compiled when nvcc is found (TESSERA_CUDA=AUTO), for one architecture (sm_90;
# TESSERA_CUDA_ARCHITECTURES overrides) since here it is only compiled, to keep the run short;
# GPU tests (label `gpu`) skip visibly on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh

build_dir=${TESSERA_BUILD_DIR:-build}
jobs=${TESSERA_JOBS:-$(nproc)}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON \
  -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCH=ON -DTESSERA_BUILD_EXAMPLES=ON \
  -DTESSERA_CUDA_ARCHITECTURES="${TESSERA_CUDA_ARCHITECTURES:-90}" "${launcher[@]}"
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"

#!/usr/bin/env bash
# Builds a relocatable folder for GPU nodes that have only the NVIDIA driver and the CUDA
# libraries (like the H200 machine): trainers, sample, inspect, benchmarks and test programs,
# with HDF5 and the CUDA runtime linked statically, and a `run` wrapper that sets the library path.
# No MPI (the GPU node has none): data-parallel programs there start their NCCL groups through a
# rendezvous file (docs/distributed.md).
#
#   scripts/bundle.sh                   # -> dist/ (sm_90, host code for x86-64-v3)
#   dist/run gpu_tests                  # on the GPU node: any program in dist/bin
#   dist/run train_lstm --device cuda --steps 100
#
# Environment: TESSERA_BUNDLE_OUT (dist), TESSERA_BUNDLE_BUILD (build-gpu),
# TESSERA_CUDA_ARCH (90), TESSERA_BUNDLE_TARGETS (the programs to build; default below).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${TESSERA_BUNDLE_OUT:-dist}
build=${TESSERA_BUNDLE_BUILD:-build-gpu}
arch=${TESSERA_CUDA_ARCH:-90}
targets=${TESSERA_BUNDLE_TARGETS:-"gpu_tests core_tests kernels_tests layers_tests models_tests optim_tests \
train_lstm train_transformer train_conv sample inspect ops_cpu executor bsmm_cpu bsconv_cpu train_cpu train_step \
lstm_step bsmm_gpu bsconv_gpu attention_gpu decode dp_scaling"}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_RUNTIME_LIBRARY=Static -DTESSERA_HDF5_STATIC=ON \
  -DTESSERA_MARCH=x86-64-v3 -DTESSERA_MPI=OFF -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_EXAMPLES=ON -DTESSERA_BUILD_BENCH=ON \
  "${launcher[@]}" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" --target $targets -j "${TESSERA_JOBS:-$(nproc)}"

rm -rf "$out"
mkdir -p "$out/bin"
for t in $targets; do
  exe=$(find "$build" -type f -name "$t" -perm -u+x | head -n 1)
  [ -n "$exe" ] || { echo "bundle.sh: no program '$t' in $build" >&2; exit 1; }
  cp "$exe" "$out/bin/"
  strip "$out/bin/$t"
done
# The example corpus, for the trainers and bench/train_step (--data "$(dirname $0)/data/input.txt").
corpus=../shared/data/tinyshakespeare/input.txt
if [ -f "$corpus" ]; then
  mkdir -p "$out/data" "$out/mirror/tinyshakespeare" && cp "$corpus" "$out/data/"
  # also as a mirror (a link), for data/fetch.sh on the GPU node (scripts/reproduce.sh nanogpt)
  ln -sf ../../data/input.txt "$out/mirror/tinyshakespeare/input.txt"
fi
# gcide's .dz (13.5 MB) when this machine has fetched it (data/fetch.sh gcide), as a mirror for
# the GPU node, which has no apt: scripts/reproduce.sh finds it there (TESSERA_DATA_MIRROR).
gcide_dz=${XDG_CACHE_HOME:-$HOME/.cache}/tessera/data/gcide/gcide.dict.dz
if [ -f "$gcide_dz" ]; then mkdir -p "$out/mirror/gcide" && cp "$gcide_dz" "$out/mirror/gcide/"; fi
# What the bundle was built from, for the run folders of scripts/reproduce.sh (provenance.txt).
{
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD -- 2>/dev/null || commit="$commit with uncommitted changes"
  echo "commit $commit"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ), CUDA architectures $arch"
} >"$out/BUILD"
cat >"$out/run" <<'RUN'
#!/usr/bin/env bash
# Runs a program of this bundle with the CUDA libraries of the node on the library path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]  (programs: $(ls "$here/bin" | tr '\n' ' '))" >&2; exit 2; }
prog=$1; shift
[ -x "$here/bin/$prog" ] || { echo "$0: no program '$prog' in $here/bin" >&2; exit 2; }
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$here/bin/$prog" "$@"
RUN
chmod +x "$out/run"
du -sh "$out"
echo "bundle: $out (run programs with $out/run PROGRAM ...)"

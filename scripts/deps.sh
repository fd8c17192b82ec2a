#!/usr/bin/env bash
# Installs the Debian packages tessera needs to build and test, when any is missing.
# Sourced or run by scripts/test.sh (and later scripts/demo.sh). Debian 12 / Ubuntu 22.04+.
set -euo pipefail

TESSERA_PACKAGES=(cmake ninja-build g++ ccache libeigen3-dev libgtest-dev libcli11-dev nlohmann-json3-dev
                  libhdf5-dev hdf5-tools python3-h5py pkg-config openmpi-bin libopenmpi-dev)

missing=()
for p in "${TESSERA_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tessera: installing missing packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

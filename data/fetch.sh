#!/usr/bin/env bash
# Fetches a text corpus, verifies its SHA-256 and prints the path of the file.
#
#   data/fetch.sh NAME [DEST]        NAME: tinyshakespeare | enwik8 | text8 | gcide
#
# Where it looks, in order (a copy whose checksum is wrong is an error, never skipped):
#   1. $TESSERA_DATA_MIRROR/NAME/      the file itself, or its .zip (gcide: gcide.dict.dz or the .deb)
#   2. <checkout>/../shared/data/NAME/ (the folder `shared/data` beside the checkout)
#   3. DEST/NAME/ from an earlier run
#   4. the canonical public URL (curl or wget), unpacked into DEST/NAME/; for gcide, Debian's
#      package: `apt-get download dict-gcide` (needs apt's lists, no root), unpacked with dpkg-deb
#      (or ar and tar)
# DEST defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/tessera/data. A file found unpacked in 1 or 2 is
# used where it is; a zip, .dz or .deb found there is unpacked into DEST/NAME/.
#
# gcide is the Collaborative International Dictionary of English (Webster's 1913 + WordNet), the
# file usr/share/dictd/gcide.dict.dz of Debian 12's dict-gcide 0.48.5+nmu2 (dictzip, read as
# gzip) unpacked to DEST/gcide/gcide.txt; the .dz (13.5 MB) is kept beside it, to carry to a
# machine without apt (put it in that machine's mirror folder).
#
# Checksums are of the unpacked files (the payload the trainers read), not of the zips: the
# mirrors of mattmahoney.net have re-packed the archives over time, while enwik8 and text8
# themselves are fixed (100,000,000 bytes each).
#
# Exit status: 0 and the file's path on stdout; 1 with one line on stderr when no verified copy
# can be had (offline and no mirror, no apt, bad checksum, failed unpack); 2 for a bad NAME or usage.
set -euo pipefail

die() { echo "fetch.sh: $1" >&2; exit "${2:-1}"; }

[[ $# -ge 1 && $# -le 2 ]] || die "usage: data/fetch.sh NAME [DEST]   (NAME: tinyshakespeare, enwik8, text8, gcide)" 2
name=$1
case "$name" in
  tinyshakespeare)
    file=input.txt; zip=""
    url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
    sha=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed ;;
  enwik8)
    file=enwik8; zip=enwik8.zip; url=http://mattmahoney.net/dc/enwik8.zip
    sha=2b49720ec4d78c3c9fabaee6e4179a5e997302b3a70029f30f2d582218c024a8 ;;
  text8)
    file=text8; zip=text8.zip; url=http://mattmahoney.net/dc/text8.zip
    sha=6e890197040d37d85beb962ae1f041ff1d9a9ca8d20c7d99c85027eebf51dca7 ;;
  gcide)
    file=gcide.txt; zip=""; url=""  # from apt: the Debian package dict-gcide
    sha=802beb667e1fb666203e750f1faea60d5c202ac5430c2083c4180494609f10a7 ;;
  *) die "unknown dataset '$name' (known: tinyshakespeare, enwik8, text8, gcide)" 2 ;;
esac

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
shared=$(cd "$script_dir/../.." && pwd)/shared/data
dest=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/data}

sha256_of() {
  if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null; then shasum -a 256 "$1" | cut -d' ' -f1
  else die "neither sha256sum nor shasum is installed"; fi
}

# verify PATH: dies naming the file unless its SHA-256 is the expected one.
verify() {
  local got
  got=$(sha256_of "$1")
  [[ $got == "$sha" ]] || die "checksum mismatch for $1: sha256 $got, expected $sha (delete or replace the file)"
}

# unpack ZIP: extracts $file into $dest/$name (unless a verified copy is there), prints its path.
unpack() {
  local out=$dest/$name/$file
  if [[ -f $out && $(sha256_of "$out") == "$sha" ]]; then echo "$out"; return 0; fi
  mkdir -p "$dest/$name" || die "cannot create $dest/$name"
  command -v unzip >/dev/null || die "unzip is not installed (needed for $1)"
  unzip -o -q "$1" "$file" -d "$dest/$name" >/dev/null 2>&1 || die "cannot unzip $file from $1"
  verify "$out"
  echo "$out"
}

# Temp files and folders, removed on exit.
cleanup=()
trap 'rm -rf ${cleanup[@]+"${cleanup[@]}"}' EXIT

# gunzip_into DZ [FROM]: unpacks DZ (gcide.dict.dz; dictzip is gzip) into $dest/$name/$file
# through a temp file, moved in place once verified; prints its path. FROM names the source in
# errors (default DZ).
gunzip_into() {
  local out=$dest/$name/$file from=${2:-$1} got
  if [[ -f $out && $(sha256_of "$out") == "$sha" ]]; then echo "$out"; return 0; fi
  mkdir -p "$dest/$name" || die "cannot create $dest/$name"
  command -v gzip >/dev/null || die "gzip is not installed (needed for $1)"
  local part=$out.part.$$
  cleanup+=("$part")
  gzip -dc "$1" >"$part" 2>/dev/null || die "cannot gunzip $1"
  got=$(sha256_of "$part")
  [[ $got == "$sha" ]] ||
    die "checksum mismatch for $file unpacked from $from: sha256 $got, expected $sha (Debian 12's dict-gcide 0.48.5+nmu2)"
  mv "$part" "$out"
  echo "$out"
}

# deb_to_txt DEB [FROM]: extracts usr/share/dictd/gcide.dict.dz of the package DEB into a temp
# folder under $dest/$name and unpacks it with gunzip_into (which prints the path); sets dz to the
# .dz's path. FROM names the package in errors (default DEB).
deb_to_txt() {
  local deb x
  deb=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  mkdir -p "$dest/$name" || die "cannot create $dest/$name"
  x=$(mktemp -d "$dest/$name/deb.XXXXXX") || die "cannot create a temp folder in $dest/$name"
  cleanup+=("$x")
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$x" >/dev/null 2>&1 || die "cannot unpack ${2:-$1} (dpkg-deb -x)"
  elif command -v ar >/dev/null && command -v tar >/dev/null; then
    (cd "$x" && ar x "$deb" && tar -xf data.tar.*) >/dev/null 2>&1 || die "cannot unpack ${2:-$1} (ar and tar)"
  else
    die "neither dpkg-deb nor ar and tar are installed (needed for ${2:-$1})"
  fi
  dz=$x/usr/share/dictd/gcide.dict.dz
  [[ -f $dz ]] || die "${2:-$1} has no usr/share/dictd/gcide.dict.dz"
  gunzip_into "$dz" "${2:-$1}"
}

# try DIR: uses DIR/$file or DIR/$zip (gcide: DIR/gcide.dict.dz, DIR/dict-gcide*.deb) and exits
# when one is there; returns when none is.
try() {
  local dir=$1 deb
  if [[ -f $dir/$file ]]; then
    verify "$dir/$file"; echo "$dir/$file"; exit 0
  elif [[ -n $zip && -f $dir/$zip ]]; then
    unpack "$dir/$zip"; exit 0
  elif [[ $name == gcide && -f $dir/gcide.dict.dz ]]; then
    gunzip_into "$dir/gcide.dict.dz"; exit 0
  elif [[ $name == gcide ]]; then
    deb=$(compgen -G "$dir/dict-gcide*.deb" | sort | tail -n 1) || true
    if [[ -n $deb ]]; then deb_to_txt "$deb"; exit 0; fi
  fi
  return 0
}

# from_apt: gets dict-gcide with `apt-get download` into a temp folder, unpacks it into
# $dest/$name and keeps the .dz there (to carry to machines without apt); prints the path.
from_apt() {
  local where="put $file, gcide.dict.dz or the dict-gcide .deb in \$TESSERA_DATA_MIRROR/$name/ or $shared/$name/"
  command -v apt-get >/dev/null || die "apt-get is not installed and no mirror has gcide; $where"
  mkdir -p "$dest/$name" || die "cannot create $dest/$name"
  local x log deb
  x=$(mktemp -d "$dest/$name/apt.XXXXXX") || die "cannot create a temp folder in $dest/$name"
  cleanup+=("$x")
  if ! log=$(cd "$x" && apt-get download -q dict-gcide 2>&1); then
    log=$(printf '%s\n' "$log" | grep -m1 '^E:' || true)
    die "apt-get download dict-gcide failed${log:+ ($log)}; run 'apt-get update' as root if apt has no lists, or $where"
  fi
  deb=$(compgen -G "$x/dict-gcide*.deb" | head -n 1) || die "apt-get download left no dict-gcide .deb in $x"
  deb_to_txt "$deb" "$(basename "$deb") from apt"
  mv "$dz" "$dest/$name/gcide.dict.dz" || true  # only a convenience: the .txt is what counts
}

if [[ -n ${TESSERA_DATA_MIRROR:-} ]]; then try "$TESSERA_DATA_MIRROR/$name"; fi
try "$shared/$name"
try "$dest/$name"
if [[ $name == gcide ]]; then from_apt; exit 0; fi

# Download into a temp file next to the target, then move it in place once complete.
mkdir -p "$dest/$name" || die "cannot create $dest/$name"
target=$dest/$name/${zip:-$file}
tmp=$target.part.$$
trap 'rm -f "$tmp"' EXIT
if command -v curl >/dev/null; then
  curl -fsSL --retry 2 --connect-timeout 20 -o "$tmp" "$url" 2>/dev/null || \
    die "cannot download $url (offline?); put $file in \$TESSERA_DATA_MIRROR/$name/ or $shared/$name/"
elif command -v wget >/dev/null; then
  wget -q -T 20 -O "$tmp" "$url" || \
    die "cannot download $url (offline?); put $file in \$TESSERA_DATA_MIRROR/$name/ or $shared/$name/"
else
  die "neither curl nor wget is installed; put $file in \$TESSERA_DATA_MIRROR/$name/ or $shared/$name/"
fi
if [[ -n $zip ]]; then
  mv "$tmp" "$target"
  unpack "$target"
  rm -f "$target"
else
  got=$(sha256_of "$tmp")
  [[ $got == "$sha" ]] || die "checksum mismatch for the download of $url: sha256 $got, expected $sha"
  mv "$tmp" "$target"
  echo "$target"
fi

#!/usr/bin/env bash
# Fetches a text corpus, verifies its SHA-256 and prints the path of the file.
#
#   data/fetch.sh NAME [DEST]        NAME: tinyshakespeare | enwik8 | text8
#
# Where it looks, in order (a copy whose checksum is wrong is an error, never skipped):
#   1. $TESSERA_DATA_MIRROR/NAME/      the file itself, or its .zip
#   2. <checkout>/../shared/data/NAME/ (the folder `shared/data` beside the checkout)
#   3. DEST/NAME/ from an earlier run
#   4. the canonical public URL (curl or wget), unpacked into DEST/NAME/
# DEST defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/tessera/data. A file found unpacked in 1 or 2 is
# used where it is; a zip found there is unpacked into DEST/NAME/.
#
# Checksums are of the unpacked files (the payload the trainers read), not of the zips: the
# mirrors of mattmahoney.net have re-packed the archives over time, while enwik8 and text8
# themselves are fixed (100,000,000 bytes each).
#
# Exit status: 0 and the file's path on stdout; 1 with one line on stderr when no verified copy
# can be had (offline and no mirror, bad checksum, failed unzip); 2 for a bad NAME or usage.
set -euo pipefail

die() { echo "fetch.sh: $1" >&2; exit "${2:-1}"; }

[[ $# -ge 1 && $# -le 2 ]] || die "usage: data/fetch.sh NAME [DEST]   (NAME: tinyshakespeare, enwik8, text8)" 2
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
  *) die "unknown dataset '$name' (known: tinyshakespeare, enwik8, text8)" 2 ;;
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

# try DIR: uses DIR/$file or DIR/$zip and exits when either is there; returns when neither is.
try() {
  local dir=$1
  if [[ -f $dir/$file ]]; then
    verify "$dir/$file"; echo "$dir/$file"; exit 0
  elif [[ -n $zip && -f $dir/$zip ]]; then
    unpack "$dir/$zip"; exit 0
  fi
  return 0
}

if [[ -n ${TESSERA_DATA_MIRROR:-} ]]; then try "$TESSERA_DATA_MIRROR/$name"; fi
try "$shared/$name"
try "$dest/$name"

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

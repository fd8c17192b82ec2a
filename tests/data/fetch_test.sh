#!/usr/bin/env bash
# Tests data/fetch.sh without the network: the shared/data folder beside the checkout, a
# $TESSERA_DATA_MIRROR with a good and a corrupted copy, a zip whose payload is wrong, unknown
# names, and the one-line error when offline (proxies pointed at a closed port) with no mirror.
#
#   tests/data/fetch_test.sh path/to/data/fetch.sh
# Exit 0: all passed; 77: passed, but the shared/data case was skipped (no shared copy); 1: failed.
set -uo pipefail

fetch=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $1"; failures=$((failures + 1)); }

# run ARGS...: runs fetch.sh without a mirror unless one is exported; sets rc, out, err.
run() {
  out=$("$@" 2>"$tmp/err"); rc=$?
  err=$(cat "$tmp/err")
}

shared_copy=$(cd "$(dirname "$fetch")/../.." && pwd)/shared/data/tinyshakespeare/input.txt
skipped=0

# 1. The shared/data folder beside the checkout.
if [[ -f $shared_copy ]]; then
  run env -u TESSERA_DATA_MIRROR "$fetch" tinyshakespeare "$tmp/dest"
  [[ $rc -eq 0 && $out == "$shared_copy" ]] || fail "shared/data: rc $rc, out '$out', err '$err'"
else
  echo "SKIP: no $shared_copy"
  skipped=1
fi

# 2. A mirror with a corrupted copy fails the checksum (exit 1, one line naming the file).
mkdir -p "$tmp/mirror/tinyshakespeare"
printf 'First Citizen:\nthis is not the real file\n' >"$tmp/mirror/tinyshakespeare/input.txt"
run env TESSERA_DATA_MIRROR="$tmp/mirror" "$fetch" tinyshakespeare "$tmp/dest"
[[ $rc -eq 1 && $err == *"checksum mismatch"*"$tmp/mirror/tinyshakespeare/input.txt"* && -z $out ]] ||
  fail "corrupted mirror: rc $rc, out '$out', err '$err'"
[[ $(printf '%s\n' "$err" | wc -l) -eq 1 ]] || fail "corrupted mirror: error is not one line: '$err'"

# 3. A mirror with a good copy is used first.
if [[ -f $shared_copy ]]; then
  cp "$shared_copy" "$tmp/mirror/tinyshakespeare/input.txt"
  run env TESSERA_DATA_MIRROR="$tmp/mirror" "$fetch" tinyshakespeare "$tmp/dest"
  [[ $rc -eq 0 && $out == "$tmp/mirror/tinyshakespeare/input.txt" ]] || fail "good mirror: rc $rc, out '$out', err '$err'"
fi

# 4. A zip in the mirror is unpacked into DEST and its payload verified.
if command -v zip >/dev/null && command -v unzip >/dev/null; then
  mkdir -p "$tmp/mirror/text8" "$tmp/z"
  printf ' anarchism originated as a term of abuse' >"$tmp/z/text8"
  (cd "$tmp/z" && zip -q "$tmp/mirror/text8/text8.zip" text8)
  run env TESSERA_DATA_MIRROR="$tmp/mirror" "$fetch" text8 "$tmp/dest"
  [[ $rc -eq 1 && $err == *"checksum mismatch"*"$tmp/dest/text8/text8"* ]] || fail "bad zip payload: rc $rc, err '$err'"
fi

# 5. Unknown names and bad usage exit 2.
run "$fetch" wikitext103
[[ $rc -eq 2 && $err == *"unknown dataset 'wikitext103'"* ]] || fail "unknown name: rc $rc, err '$err'"
run "$fetch"
[[ $rc -eq 2 ]] || fail "no arguments: rc $rc"

# 6. Offline without any copy: a copy of the script in a checkout with no shared/data beside it,
#    downloads forced to fail through a proxy on a closed port.
mkdir -p "$tmp/checkout/data"
cp "$fetch" "$tmp/checkout/data/fetch.sh"
run env -u TESSERA_DATA_MIRROR http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
  HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9 \
  "$tmp/checkout/data/fetch.sh" tinyshakespeare "$tmp/offline"
[[ $rc -eq 1 && $err == *"cannot download"*"TESSERA_DATA_MIRROR"* && -z $out ]] ||
  fail "offline: rc $rc, out '$out', err '$err'"
[[ $(printf '%s\n' "$err" | wc -l) -eq 1 ]] || fail "offline: error is not one line: '$err'"
[[ -z $(ls -A "$tmp/offline/tinyshakespeare" 2>/dev/null) ]] || fail "offline: left files behind"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "fetch.sh: all cases passed"
[[ $skipped -eq 0 ]] || exit 77

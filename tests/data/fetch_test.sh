#!/usr/bin/env bash
# Tests data/fetch.sh without the network: the shared/data folder beside the checkout, a
# $TESSERA_DATA_MIRROR with a good and a corrupted copy, a zip whose payload is wrong, unknown
# names, and the one-line error when offline (proxies pointed at a closed port) with no mirror.
# gcide (its checksum is fixed, so no fake copy passes): a corrupted gcide.txt, .dz and .deb in a
# mirror (the .deb unpacked by dpkg-deb and by ar + tar), no apt-get, a failing apt-get, an
# apt-get that downloads a corrupted package; nothing is left in DEST after a failure.
# TESSERA_FETCH_TEST_APT=1 also runs the real `apt-get download dict-gcide` (14.8 MB).
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

# ---- gcide ----
# one_line NAME: fails unless the last error was exactly one line.
one_line() { [[ $(printf '%s\n' "$err" | wc -l) -eq 1 ]] || fail "$1: error is not one line: '$err'"; }
# clean DIR NAME: fails when DIR (DEST/gcide after a failure) holds anything.
clean() { [[ -z $(ls -A "$1" 2>/dev/null) ]] || fail "$2: left files behind: $(ls -A "$1" | tr '\n' ' ')"; }

# A checkout without shared/data beside it, and a PATH with the tools fetch.sh uses but no apt-get
# and no dpkg-deb (so a .deb is unpacked by ar and tar).
bash_bin=$(command -v bash)
mkdir -p "$tmp/bin"
for t in dirname basename cut sha256sum mkdir mktemp rm mv gzip sort tail head grep ar tar ls; do
  p=$(command -v "$t") && ln -s "$p" "$tmp/bin/$t"
done

# 7. A corrupted gcide.txt in the mirror.
mkdir -p "$tmp/mirror/gcide"
printf '00-database-url\n   not the dictionary\n' >"$tmp/mirror/gcide/gcide.txt"
run env TESSERA_DATA_MIRROR="$tmp/mirror" "$fetch" gcide "$tmp/gdest"
[[ $rc -eq 1 && $err == *"checksum mismatch"*"$tmp/mirror/gcide/gcide.txt"* && -z $out ]] ||
  fail "gcide corrupted txt: rc $rc, out '$out', err '$err'"
one_line "gcide corrupted txt"

# 8. A corrupted gcide.dict.dz: unpacked into a temp file, checked, removed; DEST stays empty.
rm "$tmp/mirror/gcide/gcide.txt"
printf 'a fake dictionary\n' | gzip -c >"$tmp/mirror/gcide/gcide.dict.dz"
run env TESSERA_DATA_MIRROR="$tmp/mirror" "$fetch" gcide "$tmp/gdest"
[[ $rc -eq 1 && $err == *"checksum mismatch for gcide.txt unpacked from $tmp/mirror/gcide/gcide.dict.dz"* && -z $out ]] ||
  fail "gcide corrupted dz: rc $rc, out '$out', err '$err'"
one_line "gcide corrupted dz"
clean "$tmp/gdest/gcide" "gcide corrupted dz"
# Not gzip at all.
printf 'plain text' >"$tmp/mirror/gcide/gcide.dict.dz"
run env TESSERA_DATA_MIRROR="$tmp/mirror" "$fetch" gcide "$tmp/gdest"
[[ $rc -eq 1 && $err == *"cannot gunzip $tmp/mirror/gcide/gcide.dict.dz"* ]] || fail "gcide not gzip: rc $rc, err '$err'"
clean "$tmp/gdest/gcide" "gcide not gzip"
rm "$tmp/mirror/gcide/gcide.dict.dz"

# 9. A package dict-gcide_0_all.deb (debian-binary, control.tar.gz, data.tar.gz in an ar archive)
#    whose .dz holds the wrong text, unpacked by dpkg-deb (when installed) and by ar + tar.
if command -v ar >/dev/null && command -v tar >/dev/null; then
  d=$tmp/deb
  mkdir -p "$d/root/usr/share/dictd" "$d/ctl"
  printf 'a fake dictionary\n' | gzip -c >"$d/root/usr/share/dictd/gcide.dict.dz"
  printf 'Package: dict-gcide\nVersion: 0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: fake\n' >"$d/ctl/control"
  printf '2.0\n' >"$d/debian-binary"
  tar -czf "$d/data.tar.gz" -C "$d/root" ./usr && tar -czf "$d/control.tar.gz" -C "$d/ctl" ./control
  (cd "$d" && ar rc dict-gcide_0_all.deb debian-binary control.tar.gz data.tar.gz)
  cp "$d/dict-gcide_0_all.deb" "$tmp/mirror/gcide/"
  if command -v dpkg-deb >/dev/null; then
    run env TESSERA_DATA_MIRROR="$tmp/mirror" "$fetch" gcide "$tmp/gdest"
    [[ $rc -eq 1 && $err == *"checksum mismatch for gcide.txt unpacked from $tmp/mirror/gcide/dict-gcide_0_all.deb"* ]] ||
      fail "gcide deb (dpkg-deb): rc $rc, err '$err'"
    one_line "gcide deb (dpkg-deb)"
    clean "$tmp/gdest/gcide" "gcide deb (dpkg-deb)"
  fi
  run env PATH="$tmp/bin" TESSERA_DATA_MIRROR="$tmp/mirror" "$bash_bin" "$fetch" gcide "$tmp/gdest"
  [[ $rc -eq 1 && $err == *"checksum mismatch for gcide.txt unpacked from $tmp/mirror/gcide/dict-gcide_0_all.deb"* ]] ||
    fail "gcide deb (ar + tar): rc $rc, err '$err'"
  one_line "gcide deb (ar + tar)"
  clean "$tmp/gdest/gcide" "gcide deb (ar + tar)"
  rm "$tmp/mirror/gcide/dict-gcide_0_all.deb"
fi

# 10. No mirror and no apt-get: one line saying so and where to put a copy.
run env -u TESSERA_DATA_MIRROR PATH="$tmp/bin" "$bash_bin" "$tmp/checkout/data/fetch.sh" gcide "$tmp/gdest"
[[ $rc -eq 1 && $err == *"apt-get is not installed and no mirror has gcide"*"TESSERA_DATA_MIRROR/gcide/"* && -z $out ]] ||
  fail "gcide without apt: rc $rc, out '$out', err '$err'"
one_line "gcide without apt"
clean "$tmp/gdest/gcide" "gcide without apt"

# 11. An apt-get that cannot find the package (as without `apt-get update`): apt's E: line in one line.
mkdir -p "$tmp/apt-missing" "$tmp/apt-fake"
printf '#!%s\necho "Reading package lists..."; echo "E: Unable to locate package dict-gcide" >&2; exit 100\n' \
  "$bash_bin" >"$tmp/apt-missing/apt-get"
chmod +x "$tmp/apt-missing/apt-get"
run env -u TESSERA_DATA_MIRROR PATH="$tmp/apt-missing:$tmp/bin" "$bash_bin" "$tmp/checkout/data/fetch.sh" gcide "$tmp/gdest"
[[ $rc -eq 1 && $err == *"apt-get download dict-gcide failed (E: Unable to locate package dict-gcide)"* && -z $out ]] ||
  fail "gcide apt fails: rc $rc, out '$out', err '$err'"
one_line "gcide apt fails"
clean "$tmp/gdest/gcide" "gcide apt fails"

# 12. An apt-get that "downloads" the corrupted package of 9 into the current folder.
if [[ -f $tmp/deb/dict-gcide_0_all.deb ]]; then
  printf '#!%s\n[[ "$*" == *"download"*"dict-gcide"* ]] && exec %q %q .\nexit 1\n' "$bash_bin" \
    "$(command -v cp)" "$tmp/deb/dict-gcide_0_all.deb" >"$tmp/apt-fake/apt-get"
  chmod +x "$tmp/apt-fake/apt-get"
  run env -u TESSERA_DATA_MIRROR PATH="$tmp/apt-fake:$tmp/bin" "$bash_bin" "$tmp/checkout/data/fetch.sh" gcide "$tmp/gdest"
  [[ $rc -eq 1 && $err == *"checksum mismatch for gcide.txt unpacked from dict-gcide_0_all.deb from apt"* && -z $out ]] ||
    fail "gcide apt corrupted: rc $rc, out '$out', err '$err'"
  one_line "gcide apt corrupted"
  clean "$tmp/gdest/gcide" "gcide apt corrupted"
fi

# 13. Opt-in: the real package from apt (needs apt's lists and the network).
if [[ ${TESSERA_FETCH_TEST_APT:-0} == 1 ]]; then
  run env -u TESSERA_DATA_MIRROR "$tmp/checkout/data/fetch.sh" gcide "$tmp/real"
  [[ $rc -eq 0 && $out == "$tmp/real/gcide/gcide.txt" && -f $tmp/real/gcide/gcide.dict.dz ]] ||
    fail "gcide from apt: rc $rc, out '$out', err '$err'"
  [[ $(sha256sum "$out" 2>/dev/null | cut -d' ' -f1) == 802beb667e1fb666203e750f1faea60d5c202ac5430c2083c4180494609f10a7 ]] ||
    fail "gcide from apt: wrong checksum of '$out'"
  # The kept .dz is a mirror: unpacked again into a fresh DEST.
  mkdir -p "$tmp/dzmirror/gcide" && cp "$tmp/real/gcide/gcide.dict.dz" "$tmp/dzmirror/gcide/"
  run env TESSERA_DATA_MIRROR="$tmp/dzmirror" "$fetch" gcide "$tmp/real2"
  [[ $rc -eq 0 && $out == "$tmp/real2/gcide/gcide.txt" ]] || fail "gcide from the kept .dz: rc $rc, err '$err'"
  ls -A "$tmp/real2/gcide" | grep -qv '^gcide.txt$' && fail "gcide from the kept .dz: stray files"
else
  echo "note: the real gcide download is not run (TESSERA_FETCH_TEST_APT=1 runs it)"
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "fetch.sh: all cases passed"
[[ $skipped -eq 0 ]] || exit 77

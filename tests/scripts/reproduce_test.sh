#!/usr/bin/env bash
# scripts/reproduce.sh without a GPU or gcide: its argument errors (exit 2, one line naming the
# problem), and --plot-only on a copy of the committed gcide LSTM runs, which must give back the
# committed summary and plot exactly (the figures in docs/results.md come from those folders; every
# committed series' summary is checked the same way),
# and --pack's archive of a run series (its small files, no checkpoints).
#
#   tests/scripts/reproduce_test.sh REPO
set -uo pipefail
repo=${1:?usage: reproduce_test.sh REPO}
script=$repo/scripts/reproduce.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $1" >&2; fails=$((fails + 1)); }

# expect_usage_error WORD ARGS...: exit 2 and one line on stderr that contains WORD
expect_usage_error() {
  local word=$1; shift
  local err rc
  err=$("$script" "$@" 2>&1 >/dev/null)
  rc=$?
  [[ $rc == 2 ]] || fail "reproduce.sh $* exited $rc, not 2"
  [[ $(printf '%s\n' "$err" | wc -l) == 1 ]] || fail "reproduce.sh $*: not one line: $err"
  [[ $err == *"$word"* ]] || fail "reproduce.sh $*: '$err' does not name '$word'"
}
expect_usage_error "usage"
expect_usage_error "no-such-experiment" no-such-experiment --plot-only
expect_usage_error "--gpus '0'" lstm --gpus 0 --plot-only
expect_usage_error "--gpus 'two'" lstm --gpus two --plot-only
expect_usage_error "--budget 'soon'" lstm --budget soon --plot-only
expect_usage_error "no model 'wide'" lstm --models dense,wide --plot-only
expect_usage_error "seed 'x'" lstm --seeds 1,x --plot-only
expect_usage_error "--frobnicate" lstm --frobnicate

# the committed runs of a finished series (the first LSTM series: a fixture that does not change), drawn again
cp -r "$repo/docs/results/lstm_gcide_h200" "$tmp/runs"
rm -f "$tmp/runs/summary.json" "$tmp/runs/curves.svg"
if "$script" lstm --plot-only --out "$tmp/runs" >"$tmp/table.md" 2>"$tmp/err"; then
  cmp -s "$tmp/runs/summary.json" "$repo/docs/results/lstm_gcide_h200/summary.json" ||
    fail "--plot-only: summary.json differs from the committed one"
  cmp -s "$tmp/runs/curves.svg" "$repo/docs/results/lstm_gcide_h200/curves.svg" ||
    fail "--plot-only: curves.svg differs from the committed one"
  grep -q "^| sparse | 3 | 1.3793 " "$tmp/table.md" || fail "--plot-only: the table lacks the sparse row: $(cat "$tmp/table.md")"
else
  fail "--plot-only failed: $(cat "$tmp/err")"
fi
# every committed series redraws to its committed summary and plot (the series in progress too)
for series in "$repo"/docs/results/*_gcide*/; do
  name=$(basename "$series")
  exp=${name%%_*}
  [[ $exp == lstm || $exp == attention || $exp == weights ]] || continue
  compgen -G "$series*/done" >/dev/null || continue  # a folder of diagnosis runs, drawn by hand
  cp -r "$series" "$tmp/redraw-$name"
  if "$script" "$exp" --plot-only --out "$tmp/redraw-$name" >/dev/null 2>"$tmp/err"; then
    cmp -s "$tmp/redraw-$name/summary.json" "$series/summary.json" ||
      fail "--plot-only: $name's summary.json differs from the committed one"
  else
    fail "--plot-only on $name failed: $(cat "$tmp/err")"
  fi
done
# --pack: the runs' small files and the plot in one archive, the checkpoints left out
touch "$tmp/runs/sparse-s1/ckpt.h5"
if "$script" lstm --plot-only --out "$tmp/runs" --pack "$tmp/runs.tgz" >/dev/null 2>"$tmp/err"; then
  tar tzf "$tmp/runs.tgz" >"$tmp/list" || fail "--pack: '$tmp/runs.tgz' is not a gzipped tar"
  for f in ./sparse-s1/metrics.jsonl ./sparse-s1/config.json ./sparse-s1/done ./dense-s3/metrics.jsonl ./summary.json \
           ./curves.svg; do
    grep -qx "$f" "$tmp/list" || fail "--pack: the archive lacks $f"
  done
  grep -q "ckpt.h5" "$tmp/list" && fail "--pack: the archive holds a checkpoint"
else
  fail "--plot-only --pack failed: $(cat "$tmp/err")"
fi
expect_usage_error "--pack" lstm --pack
# a series whose runs are all finished: kept, not trained again (the bundle's `run` fails if
# called), and drawn as with --plot-only
mkdir -p "$tmp/bundle" && printf '#!/bin/sh\nexit 1\n' >"$tmp/bundle/run" && chmod +x "$tmp/bundle/run"
if "$script" lstm --models dense,sparse --seeds 1,2,3 --out "$tmp/runs" --bundle "$tmp/bundle" \
    >"$tmp/table.md" 2>"$tmp/err"; then
  [[ $(grep -c "is finished, kept" "$tmp/table.md") == 6 ]] ||
    fail "finished series: not 6 runs kept: $(cat "$tmp/table.md")"
  grep -q "^| sparse | 3 | 1.3793 " "$tmp/table.md" || fail "finished series: no sparse row: $(cat "$tmp/table.md")"
else
  fail "a finished series failed: $(cat "$tmp/err")"
fi
# a run's provenance.txt: the bundle's BUILD, the CPU, the start time (a stand-in bundle whose
# `run` exits 0 at once, a stand-in corpus by --data; the plot then finds no metrics and fails)
mkdir -p "$tmp/bundle2" && printf '#!/bin/sh\nexit 0\n' >"$tmp/bundle2/run" && chmod +x "$tmp/bundle2/run"
printf 'commit abc123\nbuilt today\n' >"$tmp/bundle2/BUILD"
echo "some text" >"$tmp/corpus.txt"
"$script" lstm --models dense --seeds 4 --device cpu --budget 1 --out "$tmp/prov" --bundle "$tmp/bundle2" \
  --data "$tmp/corpus.txt" >/dev/null 2>&1
prov=$tmp/prov/dense-s4/provenance.txt
if [[ -f $prov ]]; then
  grep -qx "build: commit abc123;built today" "$prov" || fail "provenance: no build line: $(cat "$prov")"
  grep -q "^cpu: .*, [0-9]* cores$" "$prov" || fail "provenance: no cpu line: $(cat "$prov")"
  grep -q "^started: 20[0-9][0-9]-" "$prov" || fail "provenance: no start time: $(cat "$prov")"
else
  fail "a run wrote no provenance.txt"
fi
# on a node without nvidia-smi (or without a GPU) a CUDA run still starts, its GPU line saying so
"$script" lstm --models sparse --seeds 4 --device cuda --budget 1 --out "$tmp/prov" --bundle "$tmp/bundle2" \
  --data "$tmp/corpus.txt" >/dev/null 2>&1
grep -q "^gpu: ." "$tmp/prov/sparse-s4/provenance.txt" 2>/dev/null || fail "provenance: no gpu line for a CUDA run"
expect_usage_error "--data '$tmp/none.txt'" lstm --data "$tmp/none.txt" --plot-only

# no finished runs: one error line, exit 1
mkdir -p "$tmp/empty"
err=$("$script" lstm --plot-only --out "$tmp/empty" 2>&1 >/dev/null)
rc=$?
[[ $rc == 1 && $err == *"no finished runs"* ]] || fail "--plot-only on an empty folder: exit $rc, '$err'"

[[ $fails == 0 ]] && echo "reproduce.sh: all checks passed"
exit $((fails > 0))

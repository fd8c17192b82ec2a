# Sourced by the lab's LSTM call scripts (issue 16): `row NAME PROGRAM [VAR=VALUE …]` runs PROGRAM
# (lstm_step, or an lstm_step built before a change) from dist/ under the given environment at sparse
# H 8192 1/16 (bf16, B 64, T 256; ROW_LAYOUT= another) and prints NAME, the graph step's ms and the
# two wgmma recurrences' µs a step. Writes $OUT/c.log.
row() {
  local name=$1 prog=$2; shift 2
  env "$@" timeout 90 dist/run "$prog" --hidden 0 --dtypes bf16 --repeats 3 --warmup 1 \
    --sparse "${ROW_LAYOUT:-8192:0.0625:32}" >"$OUT/c.log" 2>&1
  local graph
  graph=$(grep -E '^tessera sparse graph' "$OUT/c.log" | grep -oE 'bs32 +[0-9.]+' | awk '{print $2}')
  echo "$name: graph $graph ms," \
    "forward $(grep -E '^recurrence fwd, wgmma' "$OUT/c.log" | grep -oE '[0-9.]+ us/step')," \
    "backward $(grep -E '^recurrence bwd, wgmma' "$OUT/c.log" | grep -oE '[0-9.]+ us/step')"
}

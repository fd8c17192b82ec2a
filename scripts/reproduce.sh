#!/usr/bin/env bash
# Runs one of the papers' experiments end to end from a bundle (scripts/bundle.sh) on a GPU node:
# each model × seed trains for a fixed budget of training time (evaluations not counted) with a
# fixed seed, into its own run folder; then scripts/plot_runs.py draws the val curves (SVG, against
# training time and against steps) and writes the summary (Markdown on stdout, JSON).
#
#   scripts/reproduce.sh lstm                               # every model, seeds 1,2,3, 240 s each
#   scripts/reproduce.sh lstm --models dense,sparse --seeds 1 --budget 240
#   scripts/reproduce.sh lstm --plot-only                   # redraw from the run folders there
#   scripts/reproduce.sh attention --device cpu --budget 5 --extra "--seq 256 --width 64"  # a smoke run
#
# Experiments (NAME):
#   lstm   byte-level gcide (interleaved splits), batch 64 × 256 steps, bf16, AdamW at a constant
#          1e-3 from the first step (no warm-up, as the committed runs were made), the same for
#          every model; models at the recurrent
#          parameter count of dense width 1024:
#            dense      width 1024, dense, on cuDNN (--cudnn)
#            sparse     width 4096, 1/16 dense, blocks of 32, random layout
#            sparse-ba  the same with a Barabási–Albert layout
#            sparse-mlstm  the sparse model as a multiplicative LSTM (its extra W_mh makes the
#                       recurrent parameters 5/4 of the others'; it runs step by step on the GPU)
#   attention  byte-level gcide, context 4096, batch 8, a transformer of width 512, 8 layers, 8
#          heads (head dim 64), attention blocks of 128, QK-norm (LayerNorm on queries and keys), bf16,
#          AdamW at 6e-4 constant after 200 warm-up steps, β2 0.95, weight decay 0.1 (without
#          QK-norm the attention logits grow until the runs diverge: docs/results.md, section 2);
#          the models differ in their attention only (Child et al. 2019's claim):
#            dense      dense causal
#            fixed      the fixed pattern, stride 8 blocks (1024 positions)
#            strided    the strided pattern, stride 8 blocks
#   weights  byte-level gcide, context 1024, batch 32, 8 layers, head dim 64, otherwise as attention;
#          equal parameters in the projections (12·width² per layer: 3.1M):
#            dense      width 512, dense weights, 8 heads
#            sparse     width 1024, 16 heads, the qkv/proj/fc/fc2 weights 1/4 dense in blocks of 64
#   nanogpt  nanoGPT's shakespeare-char recipe (bench/train_step --quality: 6 × 384, context 256,
#          dropout 0.2, 5000 steps of cosine decay; it stops where val loss <= 1.47): the time and
#          step it takes, once (the recipe has no seed to vary); --budget caps its training time,
#          --models and --seeds do not apply; no plot
#
# Options: --models A,B (default: all of the experiment's), --seeds 1,2,3, --budget SECONDS (240),
# --out DIR (results/NAME), --device cuda|cpu, --bundle DIR (dist: its `run` starts the programs),
# --plot-only, --pack FILE (at the end, a .tar.gz of OUT's small files: each run folder's
# metrics.jsonl, config.json, log.txt and done, the summary and the plot, no checkpoints; paths
# relative to the checkout, like OUT: what to take off a GPU node; and each run's provenance.txt:
# the bundle's build commit, the GPU or CPU, the start time), --extra "FLAGS" (appended to every
# run's flags, the later flag winning: smoke runs of small models), --data FILE (the corpus
# itself instead of data/fetch.sh's: a copy of gcide made elsewhere), --gpus N (default 1: N runs
# at once, each on a GPU of its own by
# CUDA_VISIBLE_DEVICES, so that the equal time budgets stay comparable; with --device cpu, N
# processes at once: smoke runs only). Run folders are OUT/MODEL-sSEED; the seed sets the model's
# initialization (the config field "seed") and the sampling. gcide comes from data/fetch.sh (on a
# node without apt, put gcide.dict.dz in $TESSERA_DATA_MIRROR/gcide/; bundle.sh copies it to
# dist/mirror when the machine that builds the bundle has fetched it). A run folder that already
# holds a finished run (the file `done`, written when its trainer exited cleanly) is kept, so a
# series can be spread over several calls.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "reproduce.sh: $1" >&2; exit "${2:-1}"; }
[[ $# -ge 1 ]] || die "usage: scripts/reproduce.sh NAME [--models A,B] [--seeds 1,2,3] [--budget S] [--out DIR] [--gpus N] [--plot-only]" 2
name=$1; shift
models="" seeds=1,2,3 budget=240 out="" device=cuda bundle=dist plot_only=0 extra="" gpus=1 pack="" data=""
while [[ $# -gt 0 ]]; do
  case $1 in --models | --seeds | --budget | --out | --device | --bundle | --extra | --gpus | --pack | --data)
    [[ $# -ge 2 ]] || die "option '$1' needs a value" 2 ;;
  esac
  case $1 in
    --models) models=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --plot-only) plot_only=1; shift ;;
    --extra) extra=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --pack) pack=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    *) die "unknown option '$1'" 2 ;;
  esac
done
out=${out:-results/$name}
[[ $budget =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--budget '$budget' is not a number of seconds" 2
[[ $gpus =~ ^[1-9][0-9]*$ ]] || die "--gpus '$gpus' is not a positive whole number" 2
[[ -z $data || -f $data ]] || die "--data '$data' is not a file" 2

# --pack: OUT's small files into one archive (run folders one level down; no checkpoints)
pack_results() {
  [[ -n $pack ]] || return 0
  local files
  files=$(cd "$out" && find . -maxdepth 2 -type f \( -name metrics.jsonl -o -name config.json -o -name log.txt \
    -o -name 'done' -o -name model_seed.json -o -name summary.json -o -name curves.svg -o -name quality.json \
    -o -name provenance.txt \) | sort)
  [[ -n $files ]] || die "--pack: nothing to pack in '$out'"
  # shellcheck disable=SC2086
  tar czf "$pack" -C "$out" $files || die "--pack: cannot write '$pack'"
  echo "reproduce.sh: packed $(wc -w <<<"$files") files of $out into $pack"
}

# model flags of the experiment
declare -A flags
case $name in
  lstm)
    program=train_lstm
    common=(--dtype bf16 --batch 64 --seq 256 --steps 100000000 --lr 1e-3 --warmup 0 --schedule constant
            --eval-every 500 --eval-batches 16 --test-batches 64 --ckpt-every 0 --log-every 100 --sample-chars 0
            --split interleaved)
    flags[dense]="--hidden 1024 --block 0 --cudnn"
    flags[sparse]="--hidden 4096 --block 32 --density 0.0625 --layout random"
    flags[sparse-ba]="--hidden 4096 --block 32 --density 0.0625 --layout ba"
    flags[sparse-mlstm]="--hidden 4096 --block 32 --density 0.0625 --layout random --mlstm"
    order="dense sparse sparse-ba sparse-mlstm"
    data_name=gcide
    ;;
  attention | weights)
    program=train_transformer
    common=(--dtype bf16 --batch 8 --seq 4096 --width 512 --layers 8 --heads 8 --attn-block 128 --steps 100000000
            --lr 6e-4 --beta2 0.95 --weight-decay 0.1 --qk-norm --log-attention-logits --warmup 200 --schedule constant
            --eval-every 250 --eval-batches 8 --test-batches 32 --ckpt-every 0 --log-every 50 --sample-chars 0
            --split interleaved)
    if [[ $name == attention ]]; then
      flags[dense]="--attn-layout dense"
      flags[fixed]="--attn-layout fixed --stride 8"
      flags[strided]="--attn-layout strided --stride 8"
      order="dense fixed strided"
    else
      common+=(--batch 32 --seq 1024)  # the later flag wins
      flags[dense]="--width 512 --heads 8"
      flags[sparse]="--width 1024 --heads 16 --block 64 --density 0.25"
      order="dense sparse"
    fi
    data_name=gcide
    ;;
  nanogpt)
    program=train_step
    order="nanogpt"
    flags[nanogpt]=""
    data_name=tinyshakespeare
    ;;
  *) die "unknown experiment '$name' (known: lstm, attention, weights, nanogpt)" 2 ;;
esac
models=${models:-${order// /,}}
IFS=, read -r -a model_list <<<"$models"
IFS=, read -r -a seed_list <<<"$seeds"
for m in "${model_list[@]}"; do [[ -n ${flags[$m]+x} ]] || die "experiment '$name' has no model '$m' (models: $order)" 2; done
for s in "${seed_list[@]}"; do [[ $s =~ ^[0-9]+$ ]] || die "seed '$s' is not a whole number" 2; done

if [[ $plot_only == 0 ]]; then
  [[ -x $bundle/run ]] || die "no bundle at '$bundle' (build one with scripts/bundle.sh, or pass --bundle DIR)"
  if [[ -z ${TESSERA_DATA_MIRROR:-} && -d $bundle/mirror ]]; then export TESSERA_DATA_MIRROR=$bundle/mirror; fi
  fetch_data() { [[ -n ${data:-} ]] || data=$(data/fetch.sh "$data_name") || die "data/fetch.sh $data_name failed"; }
  mkdir -p "$out"
  if [[ $name == nanogpt ]]; then
    fetch_data
    echo "reproduce.sh: nanoGPT's recipe, at most $budget s of training -> $out/quality.json"
    # shellcheck disable=SC2086
    "$bundle/run" train_step --quality --device "$device" --data "$data" --time-limit "$budget" \
      --json "$out/quality.json" $extra 2>&1 | tee "$out/log.txt" || die "train_step --quality failed"
    pack_results
    exit 0
  fi
  # What a run ran on, into its folder (provenance.txt): the bundle's build (its BUILD file), the
  # GPU (nvidia-smi's name of GPU $2, or of every GPU of the node when the run has none of its
  # own) or the CPU, and the start time.
  write_provenance() {
    local run=$1 gpu=$2 what build=unknown
    [[ -f $bundle/BUILD ]] && build=$(tr '\n' ';' <"$bundle/BUILD")
    {
      echo "build: ${build%;}"
      if [[ $device == cuda ]]; then
        what=$(nvidia-smi --query-gpu=index,name --format=csv,noheader ${gpu:+--id=$gpu} 2>/dev/null | tr '\n' ';' ||
          echo "unknown (no nvidia-smi)")
        echo "gpu: ${what%;}"
      else
        echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
      fi
      echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$run/provenance.txt"
  }
  # One run: model $1, seed $2 into its folder, on GPU $3 of the node (empty: the inherited ones),
  # in the background; the subshell becomes the trainer (exec), so its pid is the trainer's.
  start_run() {
    local m=$1 s=$2 gpu=$3 run=$out/$1-s$2
    write_provenance "$run" "$gpu"
    (
      [[ -z $gpu ]] || export CUDA_VISIBLE_DEVICES=$gpu
      # shellcheck disable=SC2086
      exec "$bundle/run" "$program" --device "$device" --data "$data" --out "$run" --seed "$s" \
        --config "$run/model_seed.json" "${common[@]}" ${flags[$m]} --time-limit "$budget" $extra >"$run/log.txt" 2>&1
    ) &
  }
  # The runs go out to --gpus slots; a failed run stops new ones, the running ones finish.
  free=()
  for ((g = 0; g < gpus; ++g)); do free+=("$g"); done
  declare -A slot_of=() run_of=()  # pid -> slot, pid -> "model seed"
  failed=0
  # background runs ignore the terminal's SIGINT: pass it on as SIGTERM (the trainers stop cleanly)
  stop_runs() {
    local pid
    for pid in "${!slot_of[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    exit 130
  }
  trap stop_runs INT TERM
  wait_one() {  # waits for one run to end (polling: no `wait -n -p` before bash 5.1), frees its slot
    local pid status m s
    while :; do
      for pid in "${!slot_of[@]}"; do
        kill -0 "$pid" 2>/dev/null && continue
        status=0
        wait "$pid" || status=$?
        read -r m s <<<"${run_of[$pid]}"
        free+=("${slot_of[$pid]}")
        unset "slot_of[$pid]" "run_of[$pid]"
        if [[ $status != 0 ]]; then
          echo "reproduce.sh: $m seed $s failed: $(tail -n 1 "$out/$m-s$s/log.txt")" >&2
          failed=1
        else
          echo "reproduce.sh: $m seed $s: $(tail -n 1 "$out/$m-s$s/log.txt")"
          touch "$out/$m-s$s/done"
        fi
        return
      done
      sleep 1
    done
  }
  for s in "${seed_list[@]}"; do
    for m in "${model_list[@]}"; do
      run=$out/$m-s$s
      if [[ -f $run/done ]]; then echo "reproduce.sh: $run is finished, kept"; continue; fi
      while [[ ${#free[@]} -eq 0 ]]; do wait_one; done
      [[ $failed == 0 ]] || break 2
      fetch_data  # only when a run trains: a finished series is drawn again without the corpus
      rm -rf "$run" && mkdir -p "$run"
      echo "{\"seed\": $s}" >"$run/model_seed.json"
      slot=${free[0]}
      free=("${free[@]:1}")
      gpu=""  # one slot: the GPUs the script was given
      [[ $gpus -eq 1 ]] || gpu=$slot
      echo "reproduce.sh: $m seed $s, $budget s -> $run${gpu:+ (GPU $gpu)}"
      start_run "$m" "$s" "$gpu"
      slot_of[$!]=$slot
      run_of[$!]="$m $s"
    done
  done
  while [[ ${#slot_of[@]} -gt 0 ]]; do wait_one; done
  if [[ $failed != 0 ]]; then
    pack_results
    die "a run failed (above); finished runs are kept, so the same command goes on from there"
  fi
fi

# the curves of every finished run folder of the experiment's models
specs=()
for m in $order; do
  dirs=$(compgen -G "$out/$m-s*/done" | xargs -r -n1 dirname | sort | paste -sd, -) || true
  [[ -n $dirs ]] && specs+=("$m=$dirs")
done
[[ ${#specs[@]} -gt 0 ]] || die "no finished runs in $out"
python3 scripts/plot_runs.py --out "$out/curves.svg" --json "$out/summary.json" \
  --title "$name: val bits per byte (gcide), ${budget} s of training per run" "${specs[@]}"
pack_results

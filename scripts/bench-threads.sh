#!/usr/bin/env bash
# `make bench-threads`: the worker's own choice of intra-op threads and batch
# budgets (tuned on live traffic, stages/engine/tuning.rs) against each
# fixed thread count from 1 to min(cores, 4), on the whole path, on this
# machine. Each run's line also counts the decisions on the length
# buckets' largest batch the worker made on its own timings (caps made,
# buckets kept whole).
#
# Each round starts a fresh worker per setting, in turn (the order reversed
# every other round, so drift hits all alike): `fixed-N` runs with
# --intra-op-threads N and tuning off; `tuned` with the defaults. Each
# serves a round of texts first (and `tuned` more, until it has decided),
# then is measured on fresh texts. A
# run = the demo's sentences ×$FLEET_BENCH_REPEATS sent at once, first send
# to last answer (scripts/bench-path-lib.sh). Last line:
#   RESULT threads chosen=<n> chosen_per_s=<median> best_fixed=<n> best_fixed_per_s=<median> ratio=<chosen/best>
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
source scripts/bench-path-lib.sh
rounds="${FLEET_BENCH_ROUNDS:-2}"
cores=$(nproc)
settings=()
for t in $(seq "$(( cores < 4 ? cores : 4 ))"); do settings+=("fixed-$t"); done
settings+=(tuned)
cpu=$(path_cpu)
trap stop_started EXIT
path_services
echo "machine: $cpu, $cores cores; settings: ${settings[*]}; $rounds rounds"
results="$FLEET_RUN_DIR/bench-threads.results"
: >"$results"
for round in $(seq "$rounds"); do
  order=("${settings[@]}")
  if (( round % 2 == 0 )); then
    order=(); for (( i=${#settings[@]}-1; i>=0; i-- )); do order+=("${settings[$i]}"); done
  fi
  for setting in "${order[@]}"; do
    if [ "$setting" = tuned ]; then
      unset FLEET_INTRA_OP_THREADS FLEET_ENGINE_TUNING
    else
      export FLEET_INTRA_OP_THREADS=${setting#fixed-} FLEET_ENGINE_TUNING=false
    fi
    start_worker minilm "$PATH_PORT" "bench-threads-$setting.log"
    # Every setting serves a round first: a fresh worker's first batches
    # of each shape pay for libtorch's first-call optimisation.
    path_texts "$FLEET_RUN_DIR/bench-path-warm.txt"
    path_send "$FLEET_RUN_DIR/bench-path-warm.txt" >/dev/null
    [ "$setting" = tuned ] && path_wait_tuned
    threads=$(path_gauge fleet_engine_intra_op_threads)
    percent=$(path_gauge fleet_engine_batch_percent)
    path_measure "r$round-$setting"
    # Decisions on the buckets' largest batch, from the engine's timings
    # (stages/batch/speed_caps.rs): caps made (a bucket halved twice counts
    # twice), and buckets kept whole.
    log="$FLEET_RUN_DIR/bench-threads-$setting.log"
    caps=$(grep -c 'smaller batches compute faster' "$log" || true)
    kept=$(grep -c 'full batches are as fast per token' "$log" || true)
    line=$(path_result "r$round-$setting" \
      "setting=$setting threads=$threads batch_percent=$percent caps_made=$caps buckets_kept=$kept round=$round")
    echo "$line" | tee -a "$results"
    kill -TERM "$WORKER_PID"; wait "$WORKER_PID" || true
    STARTED_PIDS=("${STARTED_PIDS[@]:1}")
  done
done
unset FLEET_INTRA_OP_THREADS FLEET_ENGINE_TUNING
python3 - "$results" "$cpu" <<'PY'
import re, statistics, sys
runs = {}
chosen = []
for line in open(sys.argv[1]):
    words = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    runs.setdefault(words["setting"], []).append(float(words["answered_per_s"]))
    if words["setting"] == "tuned":
        chosen.append((words["threads"], words["batch_percent"], words.get("caps_made", "?")))
medians = {s: statistics.median(v) for s, v in runs.items()}
fixed = {s: m for s, m in medians.items() if s.startswith("fixed-")}
best = max(fixed, key=fixed.get)
for s, v in runs.items():
    print(f"{s}: " + ", ".join(f"{x:.1f}" for x in v) + f" texts/s (median {medians[s]:.1f})")
print("tuned chose (threads, batch %, bucket caps made): " + ", ".join(f"({t}, {p}, {c})" for t, p, c in chosen))
print(
    f"RESULT threads chosen={'/'.join(sorted({t for t, _, _ in chosen}))} chosen_per_s={medians['tuned']:.1f} "
    f"best_fixed={best[len('fixed-'):]} best_fixed_per_s={fixed[best]:.1f} "
    f"ratio={medians['tuned'] / fixed[best]:.3f} cpu=\"{sys.argv[2]}\""
)
PY

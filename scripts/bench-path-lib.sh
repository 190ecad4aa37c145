# Functions of the whole-path benchmarks (bench-pipeline.sh, bench-threads.sh);
# sourced after env.sh and services.sh.

PATH_PORT=9464
PATH_REPEATS="${FLEET_BENCH_REPEATS:-30}"
# Texts of every run are numbered from their own million (1000000, 2000000,
# …): the same number of digits, so every run tokenizes alike, and no run's
# texts are feature-cache hits of another's (path_forget_cache clears those
# of earlier invocations).
PATH_SERIAL=0

# path_texts FILE: the demo's real sentences, each $PATH_REPEATS times, each
# with a number of its own.
path_texts() {
  local file=$1
  PATH_SERIAL=$(( PATH_SERIAL + 1 ))
  for _ in $(seq "$PATH_REPEATS"); do cat scripts/demo-sentences.txt; done \
    | awk -v base=$(( PATH_SERIAL * 1000000 )) '{ printf "%s (%d)\n", $0, base + NR }' >"$file"
}

# path_services: Redis and the broker (started here unless running; stopped
# by stop_started), minilm's topics, no feature-cache entries of earlier runs.
path_services() {
  ensure_redis
  ensure_broker
  path_forget_cache
  "$FLEET_BIN_DIR/fleet-produce" topics --model minilm
}

# path_forget_cache: drops the feature-cache entries earlier runs left.
path_forget_cache() {
  redis-cli -p 6379 --scan --pattern 'fleet:feat:minilm:*' | xargs -r -n 1000 redis-cli -p 6379 del >/dev/null
}

path_scrape() { curl -sf "http://127.0.0.1:$PATH_PORT/metrics"; }

# path_gauge NAME: the sum of a gauge's series on the worker (0 when absent).
path_gauge() {
  path_scrape | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { print s + 0 }'
}

# path_answered: the worker's answers so far, "OK NOT_OK" (error, expired).
path_answered() {
  local scrape
  scrape=$(path_scrape) || { echo "error: the worker's /metrics did not answer" >&2; return 1; }
  awk '/^fleet_requests_total\{/ { if (index($0, "status=\"ok\"")) ok += $NF;
    else if (index($0, "status=\"error\"") || index($0, "status=\"expired\"")) bad += $NF }
    END { print ok + 0, bad + 0 }' <<<"$scrape"
}

# path_send FILE: sends every text at once (deadlines 10 min away: none may
# expire) and waits until the worker has answered them all; prints
# "ANSWERED WALL_SECONDS" (first send to last answer, to 0.1 s). It watches
# the worker's answer counter, not Redis: a client polling thousands of
# open requests every 20 ms took ~40 % of a core, and Redis ~25 %, of the
# two the path runs on.
path_send() {
  local file=$1 n before after started now answered
  n=$(wc -l <"$file")
  answered=$(path_answered) || exit 1
  read -r -a before <<<"$answered"
  started=$(date +%s%N)
  "$FLEET_BIN_DIR/fleet-produce" send --model minilm --file "$file" --ttl-ms 600000 >/dev/null
  SECONDS=0
  while :; do
    now=$(date +%s%N)
    answered=$(path_answered) || exit 1
    read -r -a after <<<"$answered"
    if (( after[1] > before[1] )); then
      echo "error: $(( after[1] - before[1] )) of $n texts answered error or expired" >&2; exit 1
    fi
    (( after[0] - before[0] >= n )) && break
    if (( SECONDS > 600 )); then
      echo "error: $(( after[0] - before[0] )) of $n texts answered after 10 minutes" >&2; exit 1
    fi
    sleep 0.1
  done
  echo "$n $(( (now - started) / 1000000 ))" | awk '{ print $1, $2 / 1000 }'
}

# path_wait_tuned: sends rounds of texts until the worker's tuning has
# decided every knob it tunes (every fleet_engine_tuned_rows_per_second
# series set), at most 8 rounds.
path_wait_tuned() {
  local round file="$FLEET_RUN_DIR/bench-path-tuning.txt"
  for round in $(seq 8); do
    if ! path_scrape | grep '^fleet_engine_tuned_rows_per_second{' | grep -q ' 0$'; then
      return 0
    fi
    path_texts "$file"
    path_send "$file" >/dev/null
  done
  echo "warning: the worker had not finished tuning after 8 rounds" >&2
}

# path_measure TAG: one measured run of fresh texts; keeps the scrapes
# around it and the run's "ANSWERED WALL_SECONDS" under $FLEET_RUN_DIR.
path_measure() {
  local tag=$1 file="$FLEET_RUN_DIR/bench-path-$1.txt"
  path_texts "$file"
  path_scrape >"$FLEET_RUN_DIR/bench-path-$tag.before"
  path_send "$file" >"$FLEET_RUN_DIR/bench-path-$tag.sent"
  path_scrape >"$FLEET_RUN_DIR/bench-path-$tag.after"
}

# path_result TAG LABEL [SHAPE GEMM_GFLOPS]: the RESULT path line of a run.
path_result() {
  local tag=$1 label=$2 shape=${3:-} gemm=${4:-} sent
  sent=$(cat "$FLEET_RUN_DIR/bench-path-$tag.sent")
  python3 scripts/path_figures.py --before "$FLEET_RUN_DIR/bench-path-$tag.before" \
    --after "$FLEET_RUN_DIR/bench-path-$tag.after" --answered "${sent% *}" --wall-seconds "${sent#* }" \
    --label "$label" ${shape:+--shape "$shape"} ${gemm:+--gemm-gflops "$gemm"}
}

# The CPU's name, for every figure.
path_cpu() { sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1; }

# Functions of the whole-path benchmarks (bench-pipeline.sh, bench-threads.sh);
# sourced after env.sh and services.sh.

PATH_PORT=9464
PATH_REPEATS="${FLEET_BENCH_REPEATS:-30}"

# path_texts TAG FILE: the demo's real sentences, each $PATH_REPEATS times,
# numbered with TAG so that the feature cache answers none of them.
path_texts() {
  local tag=$1 file=$2 r
  for r in $(seq "$PATH_REPEATS"); do sed "s/\$/ ($tag.$r)/" scripts/demo-sentences.txt; done >"$file"
}

path_scrape() { curl -sf "http://127.0.0.1:$PATH_PORT/metrics"; }

# path_gauge NAME: the sum of a gauge's series on the worker (0 when absent).
path_gauge() {
  path_scrape | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { print s + 0 }'
}

# path_send FILE: sends every text at once and waits for every answer;
# prints "ANSWERED WALL_SECONDS" (first send to last answer).
path_send() {
  local file=$1 n summary rate ok
  n=$(wc -l <"$file")
  summary=$("$FLEET_BIN_DIR/fleet-produce" send --model minilm --file "$file" --wait --timeout 600s --summary)
  rate=$(sed -n 's/^throughput: \([0-9.]*\).*/\1/p' <<<"$summary")
  ok=$(sed -n 's/^answers: .*ok=\([0-9]*\).*/\1/p' <<<"$summary")
  if [ "${ok:-0}" != "$n" ]; then
    echo "error: ${ok:-0} of $n texts answered ok:" >&2; echo "$summary" >&2; exit 1
  fi
  python3 -c "import sys; n,r=int(sys.argv[1]),float(sys.argv[2]); print(n, n/r)" "$n" "$rate"
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
    path_texts "tune$round" "$file"
    path_send "$file" >/dev/null
  done
  echo "warning: the worker had not finished tuning after 8 rounds" >&2
}

# path_measure TAG: one measured run of fresh texts; keeps the scrapes
# around it and the run's "ANSWERED WALL_SECONDS" under $FLEET_RUN_DIR.
path_measure() {
  local tag=$1 file="$FLEET_RUN_DIR/bench-path-$1.txt"
  path_texts "$tag" "$file"
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

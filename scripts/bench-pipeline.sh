#!/usr/bin/env bash
# `make bench-pipeline`: how much of the wall time the engine spends on the
# rows the whole Kafka → worker → Redis path answers, and how far the model
# is from this CPU's limit.
#
# One worker as `make demo` starts it (its precision and tuning its own),
# the demo's real sentences ×$FLEET_BENCH_REPEATS (default 30: 9600 texts),
# numbered so that the feature cache answers none. First rounds of texts
# until the worker has tuned its threads and batch budgets on this load,
# then two measured rounds, each sent at once and waited for (first send to
# last answer), the worker's /metrics scraped around each:
#
#   busy_ratio = texts answered per wall second
#                / rows computed per second of model time (fleet_inference_seconds)
#
# i.e. the share of the wall time the engine is busy with the rows it
# answers. Then, the worker stopped, `fleet-bench flops` in the worker's
# precision and threads: a large GEMM's FLOP/s (the CPU's practical peak)
# and the model's shape, from which the path's achieved FLOP/s is a
# fraction of that peak (scripts/path_figures.py).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
source scripts/bench-path-lib.sh
cpu=$(path_cpu)
trap stop_started EXIT
path_services
start_worker minilm "$PATH_PORT" bench-worker.log
precision=$(sed -n 's/.*precision chosen.*precision="\{0,1\}\([a-z0-9]*\).*/\1/p' "$FLEET_RUN_DIR/bench-worker.log" | tail -1)
precision=${precision:-fp32}
path_wait_tuned
threads=$(path_gauge fleet_engine_intra_op_threads)
percent=$(path_gauge fleet_engine_batch_percent)
echo "machine: $cpu, $(nproc) cores"
echo "worker: precision $precision, intra-op threads $threads, batch budgets ${percent} %"
grep "engine tuning: chosen" "$FLEET_RUN_DIR/bench-worker.log" | sed 's/^/worker: /' || true
for round in 1 2; do path_measure "run$round"; done
stop_started
STARTED_PIDS=()
"$FLEET_BIN_DIR/fleet-bench" --threads "$threads" --precision "$precision" flops >"$FLEET_RUN_DIR/bench-flops.txt"
cat "$FLEET_RUN_DIR/bench-flops.txt"
flops=$(cat "$FLEET_RUN_DIR/bench-flops.txt")
gemm=$(sed -n 's/^RESULT gemm .*gflops=\([0-9.]*\).*/\1/p' <<<"$flops")
shape=$(sed -n 's/^RESULT shape linear_params=\([0-9]*\) layers=\([0-9]*\) hidden=\([0-9]*\).*/\1,\2,\3/p' <<<"$flops")
for round in 1 2; do
  path_result "run$round" "precision=$precision threads=$threads batch_percent=$percent cpu=\"$cpu\"" "$shape" "$gemm"
done

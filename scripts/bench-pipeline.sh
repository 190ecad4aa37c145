#!/usr/bin/env bash
# `make bench-pipeline`: the whole Kafka → worker → Redis path against a raw
# tch loop over the same texts with the same batcher, threads and precision,
# in one run. The ratio is the share of the engine's speed that the fleet
# delivers end to end.
#
# The texts: the demo's real sentences, each sent $FLEET_BENCH_REPEATS times
# (default 30, 9600 texts) with a number appended so that none is a
# feature-cache hit: long enough (15-20 s) that the path's fixed costs (the
# first fetch, the last answer's poll: ~0.7 s in all) do not decide the
# figure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
# The worker's default: all cores but one for the model (at least 1).
cores=$(nproc)
threads="${FLEET_INTRA_OP_THREADS:-$(( cores > 1 ? cores - 1 : 1 ))}"
repeats="${FLEET_BENCH_REPEATS:-30}"
texts="$FLEET_RUN_DIR/bench-pipeline-texts.txt"
for r in $(seq "$repeats"); do sed "s/\$/ ($r)/" scripts/demo-sentences.txt; done >"$texts"
trap stop_started EXIT
ensure_redis
ensure_broker
# The worker chooses its precision (config `precision = "auto"`); the raw
# loop runs in the same one, read back from the worker's log.
redis-cli -p 6379 --scan --pattern 'fleet:feat:minilm:*' | xargs -r redis-cli -p 6379 del >/dev/null
"$FLEET_BIN_DIR/fleet-produce" topics --model minilm
FLEET_INTRA_OP_THREADS="$threads" start_worker minilm 9464 bench-worker.log
precision=$(sed -n 's/.*precision chosen.*precision="\{0,1\}\([a-z0-9]*\).*/\1/p' "$FLEET_RUN_DIR/bench-worker.log" | tail -1)
echo "worker: precision ${precision:-unknown}"
n=$(wc -l <"$texts")
demo=$("$FLEET_BIN_DIR/fleet-produce" send --model minilm --file "$texts" --wait --timeout 300s --summary \
  | tee /dev/stderr | sed -n 's/^throughput: \([0-9.]*\).*/\1/p')
stop_started
STARTED_PIDS=()
raw=$("$FLEET_BIN_DIR/fleet-bench" --threads "$threads" --precision "${precision:-fp32}" raw --file "$texts" \
  | tee /dev/stderr | sed -n 's/^RESULT raw throughput=//p')
python3 -c "import sys; r,d=float(sys.argv[1]),float(sys.argv[2]); print(f'RESULT pipeline texts={sys.argv[3]} precision={sys.argv[4]} demo_throughput={d:.1f} raw_throughput={r:.1f} ratio={d/r:.2f}')" "$raw" "$demo" "$n" "${precision:-fp32}"

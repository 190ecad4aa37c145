#!/usr/bin/env bash
# `make record-burst-lag`: a burst at one minilm worker, its consumer lag
# recorded once a second by `fleet-lag record` until the backlog is gone,
# then replayed through the HPA arithmetic (docs/autoscaling.md).
# The burst: BURST_SECONDS (10) seconds of BURST_PER_SECOND (2000) texts a
# second, about ten times what one CPU worker drains.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
trap stop_started EXIT
out="${1:-docs/data/burst-lag.csv}"
per_second="${BURST_PER_SECOND:-2000}"
seconds="${BURST_SECONDS:-10}"
ensure_redis
ensure_broker
"$FLEET_BIN_DIR/fleet-produce" topics --model minilm
start_worker minilm 9464 worker-burst.log

# Real sentences, each made unique (a numbered tag), so the feature cache
# answers none of them: every request costs a model row.
texts="$FLEET_RUN_DIR/burst-texts"
mkdir -p "$texts"
for i in $(seq "$seconds"); do
  awk -v second="$i" -v n="$per_second" '{ line[NR] = $0 }
    END { for (k = 1; k <= n; k++) print line[(k - 1) % NR + 1] " (note " second "-" k ")" }' \
    scripts/demo-sentences.txt >"$texts/$i.txt"
done

mkdir -p "$(dirname "$out")"
"$FLEET_BIN_DIR/fleet-lag" record --model minilm --interval 1s --until-drained --duration 15m --out "$out" &
recorder=$!
sleep 2   # a baseline of zero lag before the burst
kill -0 "$recorder" 2>/dev/null || { echo "error: fleet-lag record stopped" >&2; exit 1; }
echo "burst: $per_second texts a second for $seconds s"
for i in $(seq "$seconds"); do
  started=$(date +%s.%N)
  "$FLEET_BIN_DIR/fleet-produce" send --model minilm --file "$texts/$i.txt" --id-prefix "burst-$$-$i" >/dev/null
  python3 -c "import sys,time; time.sleep(max(0.0, 1.0 - (time.time() - float(sys.argv[1]))))" "$started"
done
echo "waiting for the backlog to drain (lag recorded to $out)"
wait "$recorder"
"$FLEET_BIN_DIR/fleet-lag" replay --csv "$out" --max-replicas 8 --extend-s 700

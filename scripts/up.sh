#!/usr/bin/env bash
# `make up`: the local services README's "Using it" needs, left running:
# Redis on 127.0.0.1:6379 and a broker on 127.0.0.1:9092 (each only when
# nothing answers there), and the topics of the shipped models. `make down`
# stops what this started (and nothing else); `make demo` and the commands
# of README reuse what runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
[ -x "$FLEET_BIN_DIR/fleet-produce" ] || { echo "error: fleet-produce is not built: run make setup" >&2; exit 1; }
PIDS_FILE="$FLEET_RUN_DIR/services.pids"

ensure_redis
ensure_broker
# What this started, for `make down` (added to what an earlier `make up` left).
for pid in "${STARTED_PIDS[@]}"; do echo "$pid" >>"$PIDS_FILE"; done
for model in minilm efficientnet_lite0 efficientnet_lite1; do
  "$FLEET_BIN_DIR/fleet-produce" topics --model "$model" | sed 's/^/topics: /'
done
echo
echo "up: Redis 127.0.0.1:6379, broker 127.0.0.1:9092, topics of minilm, efficientnet_lite0, efficientnet_lite1."
echo "    Start a worker as README's \"Using it\" shows; \`make down\` stops what this started."

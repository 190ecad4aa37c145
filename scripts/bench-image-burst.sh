#!/usr/bin/env bash
# `make bench-image-burst`: 300 requests with 8K JPEGs arrive at once at one
# image worker (default limits: 64 MiB in flight, 256 MiB decode budget, 2
# decode threads). Prints the worker's peak RSS once every answer is in.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
trap stop_started EXIT
ensure_redis
ensure_broker
"$FLEET_BIN_DIR/fleet-produce" topics --model efficientnet_lite0
"$FLEET_BIN_DIR/fleet-worker" --model efficientnet_lite0 --model-repo models --metrics-addr 127.0.0.1:9465 \
  >"$FLEET_RUN_DIR/worker-image.log" 2>&1 &
worker=$!
STARTED_PIDS=("$worker" "${STARTED_PIDS[@]}")
for _ in $(seq 300); do
  grep -q "partitions assigned" "$FLEET_RUN_DIR/worker-image.log" && break
  kill -0 "$worker" 2>/dev/null || { tail -20 "$FLEET_RUN_DIR/worker-image.log"; exit 1; }
  sleep 0.1
done
"$FLEET_BIN_DIR/fleet-bench" image-burst --worker-pid "$worker" "$@"

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
start_worker efficientnet_lite0 9465 worker-image.log
"$FLEET_BIN_DIR/fleet-bench" image-burst --worker-pid "$WORKER_PID" "$@"

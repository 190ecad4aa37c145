#!/usr/bin/env bash
# `make loadtest`: a short steady run (20 req/s, half of what one worker here
# sustains), then a burst (ten times that for 10 s), against one minilm
# worker on this machine. Each run
# writes a report folder (records.csv, seconds.csv, plots, summary.txt)
# under loadtest-report/ and ends with its ledger; a lost request fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
trap stop_started EXIT
rate="${LOADTEST_RATE:-20}"
# The generator, broker and Redis share this machine's cores with the
# worker: one libtorch thread, or two collapse (docs/capacity.md).
export FLEET_INTRA_OP_THREADS="${FLEET_INTRA_OP_THREADS:-1}"
stamp=$(date +%Y%m%d-%H%M%S)
ensure_redis
ensure_broker
"$FLEET_BIN_DIR/fleet-produce" topics --model minilm
start_worker minilm 9464 worker-loadtest.log
echo "steady: $rate req/s for 30 s"
"$FLEET_BIN_DIR/loadtest" run --profile steady --rate "$rate" --duration 30s --seed 1 \
  --out "loadtest-report/$stamp-steady" "$@"
echo
echo "burst: $rate req/s, $((rate * 10)) req/s from 10 s to 20 s, for 40 s"
"$FLEET_BIN_DIR/loadtest" run --profile burst --rate "$rate" --burst-factor 10 --burst-at 10s --burst-for 10s \
  --duration 40s --seed 2 --out "loadtest-report/$stamp-burst" "$@"

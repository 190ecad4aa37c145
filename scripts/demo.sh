#!/usr/bin/env bash
# `make demo`: a real request path on this machine. Starts the broker (and
# Redis) if none is running, creates the topics, starts one worker, sends the
# demo sentences, waits for every answer and prints a summary. Stops only
# what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/services.sh
for bin in fleet-worker fleet-produce; do
  [ -x "$FLEET_BIN_DIR/$bin" ] || { echo "error: $bin is not built: run make setup" >&2; exit 1; }
done
trap stop_started EXIT

ensure_redis
ensure_broker
"$FLEET_BIN_DIR/fleet-produce" topics --model minilm

echo "worker: starting (log .fleet/worker.log, metrics http://127.0.0.1:9464/metrics)"
start_worker minilm 9464 worker.log
echo "worker: warm and consuming"

n=$(wc -l < scripts/demo-sentences.txt)
echo
echo "sending $n sentences to infer.minilm and waiting for every answer..."
"$FLEET_BIN_DIR/fleet-produce" send --model minilm --file scripts/demo-sentences.txt \
  --wait --timeout 60s --summary --pairs 6

# Vision and text at once: each photo goes to the image model and, with its
# caption, to the text model as one two-part request.
"$FLEET_BIN_DIR/fleet-produce" topics --model efficientnet_lite0
start_worker efficientnet_lite0 9465 worker-image.log
echo
echo "sending real photos (scikit-image) to infer.efficientnet_lite0, each with a caption to infer.minilm..."
"$FLEET_BIN_DIR/fleet-produce" image --model efficientnet_lite0 --text-model minilm \
  --caption "a photo taken for the demo" --wait --timeout 60s models/efficientnet_lite0/1/reference/*.{png,jpg}

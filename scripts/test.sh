#!/usr/bin/env bash
# `make test`: the whole suite — the deployment checks (scripts/test-deploy.sh),
# unit and property tests, and integration tests that start their own nisshi
# broker and redis-server on free ports and run the real worker on the real
# model.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
[ -x "$FLEET_NISSHI_BIN" ] || { echo "error: no broker at $FLEET_NISSHI_BIN: run make setup" >&2; exit 1; }
for model in minilm efficientnet_lite0 efficientnet_lite1 fixture_topics fixture_reranker fixture_fragile; do
  [ -f "models/$model/1/model.pt" ] || { echo "error: models/$model is not exported: run make setup" >&2; exit 1; }
done
export FLEET_MODEL_REPO="$PWD/models"
# The Prometheus server (and promtool) the live monitoring test runs.
eval "$(bash scripts/setup-ops-tools.sh --env)"
[ -x "$FLEET_PROMETHEUS" ] || { echo "error: no Prometheus server at $FLEET_PROMETHEUS: run make setup" >&2; exit 1; }
# The layout: the worker's imports run downward, no source file too long.
python3 scripts/check-layout.py
# The chart, compose file, alert rules and dashboard, checked offline.
bash scripts/test-deploy.sh
# The drills run the built fleet-worker binary: build it from this tree first.
cargo build --release --workspace --bins
# Every make target, path, FLEET_* variable and flag the docs name exists.
python3 scripts/check-docs.py "$FLEET_BIN_DIR"
cargo test --release --workspace "$@"

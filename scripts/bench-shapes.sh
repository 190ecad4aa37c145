#!/usr/bin/env bash
# `make bench-shapes`: the C heap bytes the text model keeps per new batch
# shape (fleet-bench shapes), in fp32 and bf16, with libtorch's kernel
# caches at their defaults, with oneDNN's off, and with ideep's off too
# (docs/benchmarks.md, "What libtorch keeps per batch shape").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
for precision in fp32 bf16; do
  "$FLEET_BIN_DIR/fleet-bench" shapes --precision "$precision"
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 "$FLEET_BIN_DIR/fleet-bench" shapes --precision "$precision"
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 LRU_CACHE_CAPACITY=1 "$FLEET_BIN_DIR/fleet-bench" shapes --precision "$precision"
done

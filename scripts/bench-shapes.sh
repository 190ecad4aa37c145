#!/usr/bin/env bash
# `make bench-shapes`: the C heap bytes the text model keeps per new batch
# shape (fleet-bench shapes), in fp32 and bf16, with libtorch's kernel
# caches at their defaults, with oneDNN's off, with ideep's off too, and
# bounded the way a text worker bounds them by default
# (--kernel-cache-capacity auto: set in-process before libtorch starts)
# (docs/benchmarks.md, "What libtorch keeps per batch shape").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
for precision in fp32 bf16; do
  "$FLEET_BIN_DIR/fleet-bench" shapes --precision "$precision"
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 "$FLEET_BIN_DIR/fleet-bench" shapes --precision "$precision"
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 LRU_CACHE_CAPACITY=1 "$FLEET_BIN_DIR/fleet-bench" shapes --precision "$precision"
  "$FLEET_BIN_DIR/fleet-bench" shapes --precision "$precision" --kernel-cache-capacity auto
done

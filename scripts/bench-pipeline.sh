#!/usr/bin/env bash
# `make bench-pipeline`: the whole Kafka → worker → Redis path (make demo)
# against a raw tch loop over the same sentences with the same batcher and
# threads, in one run. The ratio is the share of the engine's speed that the
# fleet delivers end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
threads="${FLEET_INTRA_OP_THREADS:-$(nproc)}"
raw=$("$FLEET_BIN_DIR/fleet-bench" --threads "$threads" raw --file scripts/demo-sentences.txt | tee /dev/stderr | sed -n 's/^RESULT raw throughput=//p')
# The demo's sentences are answered from the feature cache (fleet:feat:*,
# 300 s) when they were computed lately, by an earlier run of this or of
# `make demo`: drop those entries so the demo computes what raw computed.
if redis-cli -p 6379 ping >/dev/null 2>&1; then
  redis-cli -p 6379 --scan --pattern 'fleet:feat:minilm:*' | xargs -r redis-cli -p 6379 del >/dev/null
fi
demo=$(FLEET_INTRA_OP_THREADS="$threads" bash scripts/demo.sh | tee /dev/stderr | sed -n 's/^throughput: \([0-9.]*\).*/\1/p')
python3 -c "import sys; r,d=float(sys.argv[1]),float(sys.argv[2]); print(f'RESULT pipeline demo_throughput={d:.1f} raw_throughput={r:.1f} ratio={d/r:.2f}')" "$raw" "$demo"

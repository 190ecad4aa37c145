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
demo=$(FLEET_INTRA_OP_THREADS="$threads" bash scripts/demo.sh | tee /dev/stderr | sed -n 's/^throughput: \([0-9.]*\).*/\1/p')
python3 -c "import sys; r,d=float(sys.argv[1]),float(sys.argv[2]); print(f'RESULT pipeline demo_throughput={d:.1f} raw_throughput={r:.1f} ratio={d/r:.2f}')" "$raw" "$demo"

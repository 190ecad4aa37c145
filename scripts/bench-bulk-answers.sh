#!/usr/bin/env bash
# `make bench-bulk-answers`: a real backfill (100 000 texts made of this
# machine's Debian licence and changelog lines) sent and collected with
# `fleet-produce bulk --out` beside interactive load, against the same
# backfill with its answers in Redis, then with the worker killed twice and
# the collector once (docs/benchmarks.md). Output kept in loadtest-report/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export FLEET_MODEL_REPO="$PWD/models"
work=loadtest-report/bulk-answers
mkdir -p "$work"
# Distinct lines of real documents, 25 characters or more: every package's
# copyright file, the common licences and the Debian changelogs.
{
  cat /usr/share/doc/*/copyright /usr/share/common-licenses/* 2>/dev/null || true
  zcat -f /usr/share/doc/*/changelog*.gz 2>/dev/null || true
} | LC_ALL=C tr -d '\r' | LC_ALL=C awk 'length($0) >= 25 && length($0) <= 400' | LC_ALL=C sort -u > "$work/lines.txt"
echo "lines of real documents: $(wc -l < "$work/lines.txt") in $work/lines.txt"
set -o pipefail
"$FLEET_BIN_DIR/loadtest" bulk-answers --lines "$work/lines.txt" --work-dir "$work" ${BULK_ANSWERS_ARGS:---faults} 2>&1 | tee "$work/output.txt"

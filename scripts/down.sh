#!/usr/bin/env bash
# `make down`: stops the services `make up` started (never a Redis or broker
# that was already running before it).
set -euo pipefail
cd "$(dirname "$0")/.."
PIDS_FILE="${FLEET_RUN_DIR:-$PWD/.fleet}/services.pids"
if [ ! -s "$PIDS_FILE" ]; then
  echo "down: nothing started by make up"
  exit 0
fi
while read -r pid; do
  name=$(ps -o comm= -p "$pid" 2>/dev/null) || continue   # gone already
  kill -TERM "$pid" 2>/dev/null || continue
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  echo "down: stopped $name ($pid)"
done <"$PIDS_FILE"
rm -f "$PIDS_FILE"

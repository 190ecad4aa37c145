"""Cross-encoders (`text --task rerank`): one logit per (query, document)
pair, checked against the eager model on the real pairs of `--pairs`.
Apart from text.py because its reference is pairs and a ranking, not
sentences."""

import json
import sys
from pathlib import Path

import torch

from .output import write_text_version
from .tolerances import MAX_PROBABILITY_DIFF


def export_rerank(args, model):
    """Checks and writes the traced cross-encoder `model` (text.TracedText)."""
    src, hf, tokenizer = model.src, model.hf, model.tokenizer
    if hf.config.num_labels != 1:
        sys.exit(f"{src}: a cross-encoder scores one logit per pair; this model has {hf.config.num_labels} labels")
    if not args.pairs:
        sys.exit("text --task rerank: --pairs FILE (a JSON list of {query, documents})")
    activation = args.activation or "sigmoid"
    if activation not in ("sigmoid", "none"):
        sys.exit("rerank: --activation sigmoid or none")
    activate = torch.sigmoid if activation == "sigmoid" else (lambda x: x)
    requests = json.loads(Path(args.pairs).read_text(encoding="utf-8"))
    items, worst = [], 0.0
    for request in requests:
        queries = [request["query"]] * len(request["documents"])
        enc = tokenizer(queries, request["documents"], padding=True, truncation=True,
                        max_length=args.max_seq_len, return_tensors="pt")
        batch = [enc[name].to(args.device) for name in model.inputs]
        expected = activate(model.eager(*batch).float().cpu()[:, 0])
        got = activate(model.traced(*batch).float().cpu()[:, 0])
        worst = max(worst, (expected - got).abs().max().item())
        if not torch.equal(expected.argsort(descending=True), got.argsort(descending=True)):
            sys.exit(f"the traced cross-encoder ranks {request['query']!r} differently from the eager one")
        lengths = enc["attention_mask"].sum(1)
        items.append({"query": request["query"], "documents": request["documents"],
                      "scores": [round(x, 7) for x in expected.tolist()], "tokens": int(lengths.max())})
    if worst > MAX_PROBABILITY_DIFF[args.dtype]:
        sys.exit(f"the traced cross-encoder's scores differ from the eager one's by {worst}")
    pairs = sum(len(r["documents"]) for r in requests)
    check = f"scores within {worst:.2e} of the eager cross-encoder on {pairs} pairs, same order"
    # Every request's pairs go in one batch: as many documents as the
    # draft's budgets hold at max_seq_len.
    max_documents = max(1, min(64, 2048 // args.max_seq_len, 262144 // args.max_seq_len ** 2, 32))
    task = {"type": "rerank", "activation": activation, "max_documents": max_documents}
    write_text_version(args, model, task, check, items, {})

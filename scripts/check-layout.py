#!/usr/bin/env python3
"""The layout's two rules (docs/architecture.md, "The worker's layout").

1. The worker's imports run downward only. Each top-level module of
   crates/fleet-worker/src stands on a floor; a file may name
   `crate::<module>` only for a module on its own floor or a lower one.
   Shared types belong one floor down, so an import that runs back up
   fails `make test` here, with the line that does it.
2. No source file is longer than one can read in one sitting (MAX_LINES):
   a file that grows past it is split by concept, not trimmed.
"""
import pathlib
import re
import subprocess
import sys

MAX_LINES = 400
SOURCE_ENDINGS = (".rs", ".py", ".go", ".sh")

# Lowest first. A module missing here is an error: every new top-level
# module is given its floor on purpose.
FLOORS = [
    ("foundations", {"metrics", "guard", "shutdown", "heap", "backoff"}),
    ("settings", {"config", "kernel_caches"}),
    ("shared types and state", {"core"}),
    ("the stages", {"stages"}),
    ("model versions", {"versions"}),
    ("what the worker says about itself", {"status"}),
    ("wiring", {"worker", "lib", "main"}),
]
FLOOR_OF = {module: level for level, (_, modules) in enumerate(FLOORS) for module in modules}
CRATE_PATH = re.compile(r"\bcrate::([a-z_]+)")


def code_of(line: str) -> str:
    """The line without its comment (doc comments name paths in prose)."""
    return line.split("//", 1)[0]


CRATE_GROUP = re.compile(r"\bcrate::\{([^}]*)\}")
SUPERS = re.compile(r"\b((?:super::)+)([a-z_]+)")


def modules_named(code: str, module_path: list) -> list:
    """The top-level modules a line of code names: `crate::x`, each head of
    `crate::{x::.., y}`, and `super::..::x` where the supers climb to the
    crate's root."""
    named = CRATE_PATH.findall(code)
    for group in CRATE_GROUP.findall(code):
        named += [part.strip().split("::")[0] for part in group.split(",") if part.strip()]
    for supers, head in SUPERS.findall(code):
        if supers.count("super::") >= len(module_path):
            named.append(head)
    return [name for name in named if name != "{"]


def imports_running_up(src: pathlib.Path) -> list:
    problems = []
    for path in sorted(src.rglob("*.rs")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        own = parts[0]
        if parts[-1] == "mod":
            parts.pop()
        if own not in FLOOR_OF:
            problems.append(f"{path}: module `{own}` has no floor in scripts/check-layout.py")
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for target in modules_named(code_of(line), parts):
                if target not in FLOOR_OF:
                    problems.append(f"{path}:{number}: `crate::{target}` has no floor")
                elif FLOOR_OF[target] > FLOOR_OF[own]:
                    problems.append(
                        f"{path}:{number}: {own} ({FLOORS[FLOOR_OF[own]][0]}) imports {target} "
                        f"({FLOORS[FLOOR_OF[target]][0]}), a floor above it"
                    )
    return problems


def files_too_long(root: pathlib.Path) -> list:
    """Every source file git tracks or would track, over MAX_LINES."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root, check=True, capture_output=True, text=True,
    ).stdout.split()
    problems = []
    for name in listed:
        path = root / name
        if name.endswith(SOURCE_ENDINGS) and path.is_file():
            lines = len(path.read_text(errors="replace").splitlines())
            if lines > MAX_LINES:
                problems.append(f"{name}: {lines} lines (at most {MAX_LINES}): split it by concept")
    return problems


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    src = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "crates/fleet-worker/src"
    problems = imports_running_up(src) + (files_too_long(root) if len(sys.argv) == 1 else [])
    for problem in problems:
        print(problem)
    if problems:
        print(f"check-layout: {len(problems)} problem(s)")
        return 1
    print(f"check-layout: the worker's imports run downward ({len(FLOORS)} floors); no source file over {MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())

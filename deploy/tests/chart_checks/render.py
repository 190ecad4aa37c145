"""Rendering the chart: where it is, `helm template` of a scenario's values
(or its failure), and the values as the chart resolves them. Every check
reads what these render.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import yaml


ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm/fleet"
RELEASE = "fleet"
NAMESPACE = "fleet"


class Helm:
    def __init__(self, binary: str, chart: Path):
        self.binary = binary
        self.chart = chart

    def template(self, values: dict | None = None, files: list[Path] = (), expect_failure=False):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
            yaml.safe_dump(values or {}, handle)
            extra = handle.name
        cmd = [self.binary, "template", RELEASE, str(self.chart), "--namespace", NAMESPACE]
        for f in files:
            cmd += ["-f", str(f)]
        cmd += ["-f", extra]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        Path(extra).unlink()
        stderr = "\n".join(l for l in proc.stderr.splitlines() if "found symbolic link" not in l)
        if expect_failure:
            return proc.returncode, stderr
        if proc.returncode != 0:
            raise AssertionError(f"helm template failed: {stderr.strip()}")
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return proc.stdout, docs


def chart_values():
    return yaml.safe_load((CHART / "values.yaml").read_text())


def resolved_models(values):
    """(name, partitions, max) per model, as the chart resolves them."""
    defaults = values["modelDefaults"]
    out = []
    for model in values["models"]:
        partitions = int(model.get("partitions", defaults["partitions"]))
        replicas = {**defaults.get("replicas", {}), **model.get("replicas", {})}
        maximum = replicas.get("max")
        maximum = partitions if maximum in (None, "") else int(maximum)
        out.append((model["name"], partitions, maximum))
    return out

"""The whole path's figures from two scrapes of a worker's /metrics around a
run (`make bench-pipeline`, `make bench-threads`).

busy_ratio = rows answered per wall second / rows the engine computed per
second of model time (fleet_inference_seconds_sum): the share of the wall
time the engine spends on the rows it answers. Beside it, the engine's
utilisation (model seconds per wall second), the padding efficiency (mean
over batches) and, given the CPU's GEMM peak and the model's shape
(`fleet-bench flops`), the model's achieved FLOP/s as a fraction of that
peak. Attention FLOPs are estimated from the mean padded length (the
scrape has the tokens per batch, not each batch's length).
"""

import argparse
import re
import sys

SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def totals(path):
    """Each metric name's value summed over its series."""
    sums = {}
    with open(path, encoding="utf-8") as scrape:
        for line in scrape:
            match = SERIES.match(line)
            if match and not line.startswith("#"):
                name, value = match.group(1), float(match.group(3))
                sums[name] = sums.get(name, 0.0) + value
    return sums


def figures(before, after, answered, wall_s, shape=None, gemm_gflops=None):
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    busy = delta.get("fleet_inference_seconds_sum", 0.0)
    batches = delta.get("fleet_inference_seconds_count", 0.0)
    rows = delta.get("fleet_model_rows_total", 0.0)
    tokens = delta.get("fleet_batch_tokens_sum", 0.0)
    padding_batches = delta.get("fleet_padding_efficiency_count", 0.0)
    if busy <= 0 or rows <= 0 or wall_s <= 0:
        raise ValueError(f"nothing was computed between the scrapes (busy {busy} s, rows {rows})")
    out = {
        "answered_per_s": answered / wall_s,
        "engine_rows_per_busy_s": rows / busy,
        "busy_ratio": (answered / wall_s) / (rows / busy),
        "utilisation": busy / wall_s,
        "padding_efficiency": delta.get("fleet_padding_efficiency_sum", 0.0) / max(padding_batches, 1.0),
        "rows_per_batch": rows / max(batches, 1.0),
    }
    if shape is not None:
        linear_params, layers, hidden = shape
        mean_len = tokens / rows
        flops = 2.0 * linear_params * tokens + 4.0 * layers * hidden * mean_len * tokens
        out["achieved_gflops"] = flops / busy / 1e9
        if gemm_gflops:
            out["gemm_gflops"] = gemm_gflops
            out["flops_fraction"] = out["achieved_gflops"] / gemm_gflops
    return out


def result_line(label, values):
    words = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
    return f"RESULT path {words} {label}".rstrip()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--answered", type=int, required=True)
    ap.add_argument("--wall-seconds", type=float, required=True)
    ap.add_argument("--label", default="", help="words put at the end of the RESULT line (cpu, precision, threads)")
    ap.add_argument("--shape", help="linear_params,layers,hidden (fleet-bench flops)")
    ap.add_argument("--gemm-gflops", type=float)
    args = ap.parse_args()
    shape = tuple(float(x) for x in args.shape.split(",")) if args.shape else None
    try:
        values = figures(totals(args.before), totals(args.after), args.answered, args.wall_seconds, shape, args.gemm_gflops)
    except ValueError as e:
        sys.exit(f"error: {e}")
    print(result_line(args.label, values))


if __name__ == "__main__":
    main()

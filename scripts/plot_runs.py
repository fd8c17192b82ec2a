#!/usr/bin/env python3
"""Validation curves of several training runs: one SVG and a summary (Markdown and JSON).

    scripts/plot_runs.py --out results/lstm/curves.svg --json results/lstm/summary.json \
        dense=results/lstm/dense-s1,results/lstm/dense-s2 sparse=results/lstm/sparse-s1,...

Each LABEL=DIR[,DIR...] is one model: its runs (seeds) are the run folders' metrics.jsonl files
(the trainers' rows: step, train_s = training seconds without evaluations, val_loss in nats per
token on evaluation steps). Values are shown in bits per token (val_loss / ln 2; bits per byte
for byte-level corpora). The SVG has two panels, val bits against training time and against
steps: a thin line per run and a thick one for the mean over the model's runs. The summary gives
per model the final val bits (mean and spread over runs), the steps and training seconds reached,
and the val bits at the last evaluation step that every run of every model reached (equal
steps), and the test split's bits when the runs logged a final test_loss row (--test-batches).
Only the Python standard library is used.
"""
import argparse
import json
import math
import os
import statistics
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def read_run(folder):
    path = os.path.join(folder, "metrics.jsonl")
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        sys.exit(f"plot_runs.py: cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"plot_runs.py: {path} is not JSON lines: {e}")
    evals = [r for r in rows if "val_loss" in r and r.get("step", 0) > 0]
    if not evals:
        sys.exit(f"plot_runs.py: {path} has no evaluation rows (val_loss)")
    points = [(r["step"], r.get("train_s", r.get("elapsed_s", 0.0)), r["val_loss"] / math.log(2)) for r in evals]
    trained = [r for r in rows if "train_loss" in r]
    last = trained[-1] if trained else evals[-1]
    tests = [r["test_loss"] / math.log(2) for r in rows if "test_loss" in r]
    return {"folder": folder, "points": points, "steps": last["step"],
            "train_s": last.get("train_s", last.get("elapsed_s", 0.0)), "test_bits": tests[-1] if tests else None}


def nice_ticks(lo, hi, count=6):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks, v = [], first
    while v <= hi + 1e-9 * step:
        ticks.append(round(v, 10))
        v += step
    return ticks


def fmt_tick(v):
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def mean_curve(runs, key):
    """The mean over runs at the evaluation steps all runs share (key 0: step, 1: seconds)."""
    common = set(p[0] for p in runs[0]["points"])
    for r in runs[1:]:
        common &= set(p[0] for p in r["points"])
    out = []
    for s in sorted(common):
        xs, ys = [], []
        for r in runs:
            p = next(p for p in r["points"] if p[0] == s)
            xs.append(p[key])
            ys.append(p[2])
        out.append((statistics.fmean(xs), statistics.fmean(ys)))
    return out


def panel(models, key, x0, y0, w, h, title, xlabel, ylo, yhi):
    xs = [p[key] for m in models for r in m["runs"] for p in r["points"]]
    xhi = max(xs) if xs else 1
    sx = lambda v: x0 + w * v / xhi
    sy = lambda v: y0 + h - h * (min(max(v, ylo), yhi) - ylo) / (yhi - ylo)
    out = [f'<rect class="plot-box" x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#444"/>',
           f'<text x="{x0 + w / 2}" y="{y0 - 10}" text-anchor="middle" font-size="14">{title}</text>',
           f'<text x="{x0 + w / 2}" y="{y0 + h + 36}" text-anchor="middle" font-size="12">{xlabel}</text>']
    for t in nice_ticks(0, xhi):
        out.append(f'<line x1="{sx(t):.1f}" y1="{y0}" x2="{sx(t):.1f}" y2="{y0 + h}" stroke="#ddd"/>')
        out.append(f'<text x="{sx(t):.1f}" y="{y0 + h + 16}" text-anchor="middle" font-size="11">{fmt_tick(t)}</text>')
    for t in nice_ticks(ylo, yhi):
        if ylo <= t <= yhi:
            out.append(f'<line x1="{x0}" y1="{sy(t):.1f}" x2="{x0 + w}" y2="{sy(t):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{x0 - 6}" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{t:g}</text>')
    for m in models:
        for r in m["runs"]:
            pts = " ".join(f"{sx(p[key]):.1f},{sy(p[2]):.1f}" for p in r["points"])
            out.append(f'<polyline class="run" points="{pts}" fill="none" stroke="{m["colour"]}" '
                       f'stroke-width="0.8" opacity="0.5"/>')
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in mean_curve(m["runs"], key))
        out.append(f'<polyline class="series" points="{pts}" fill="none" stroke="{m["colour"]}" stroke-width="2"/>')
    return out


def render(models, title):
    width, height = 1000, 460
    ys = sorted(p[2] for m in models for r in m["runs"] for p in r["points"])
    # the y range: from the lowest value to the 90th percentile (the first evaluations are far above)
    ylo, yhi = ys[0], ys[min(len(ys) - 1, int(0.9 * len(ys)))]
    pad = 0.05 * (yhi - ylo if yhi > ylo else 1)
    ylo, yhi = ylo - pad, yhi + pad
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="16">{title}</text>',
           f'<text x="18" y="{height / 2}" transform="rotate(-90 18 {height / 2})" text-anchor="middle" '
           f'font-size="12">val bits per token</text>']
    out += panel(models, 1, 70, 60, 390, 320, "against training time", "training seconds (evaluations not counted)",
                 ylo, yhi)
    out += panel(models, 0, 570, 60, 390, 320, "against steps", "step", ylo, yhi)
    for i, m in enumerate(models):
        x = 70 + 230 * i
        out.append(f'<line x1="{x}" y1="{height - 22}" x2="{x + 24}" y2="{height - 22}" stroke="{m["colour"]}" '
                   f'stroke-width="3"/>')
        out.append(f'<text x="{x + 30}" y="{height - 18}" font-size="12">{m["label"]} ({len(m["runs"])} runs)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def summarize(models):
    common = None
    for m in models:
        for r in m["runs"]:
            s = set(p[0] for p in r["points"])
            common = s if common is None else common & s
    equal_step = max(common) if common else None
    rows = []
    for m in models:
        final = [r["points"][-1][2] for r in m["runs"]]
        row = {"model": m["label"], "runs": len(final), "final_val_bits_mean": statistics.fmean(final),
               "final_val_bits_spread": max(final) - min(final), "final_val_bits": final,
               "steps": [r["steps"] for r in m["runs"]], "train_s": [r["train_s"] for r in m["runs"]]}
        tests = [r["test_bits"] for r in m["runs"] if r["test_bits"] is not None]
        if len(tests) == len(final):
            row["test_bits_mean"] = statistics.fmean(tests)
            row["test_bits_spread"] = max(tests) - min(tests)
            row["test_bits"] = tests
        if equal_step is not None:
            at = [next(p[2] for p in r["points"] if p[0] == equal_step) for r in m["runs"]]
            row["equal_step"] = equal_step
            row["val_bits_at_equal_step_mean"] = statistics.fmean(at)
        rows.append(row)
    return rows


def markdown(rows):
    eq = rows[0].get("equal_step")
    head = "| model | runs | final val bits (mean) | spread | steps | training s |"
    sep = "| --- | --- | --- | --- | --- | --- |"
    if eq is not None:
        head += f" val bits at step {eq} |"
        sep += " --- |"
    test = all("test_bits_mean" in r for r in rows)
    if test:
        head += " test bits (mean) | spread |"
        sep += " --- | --- |"
    lines = [head, sep]
    for r in rows:
        line = (f"| {r['model']} | {r['runs']} | {r['final_val_bits_mean']:.4f} | {r['final_val_bits_spread']:.4f} | "
                f"{'/'.join(str(s) for s in r['steps'])} | {'/'.join(f'{t:.0f}' for t in r['train_s'])} |")
        if eq is not None:
            line += f" {r['val_bits_at_equal_step_mean']:.4f} |"
        if test:
            line += f" {r['test_bits_mean']:.4f} | {r['test_bits_spread']:.4f} |"
        lines.append(line)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", metavar="LABEL=DIR[,DIR...]")
    ap.add_argument("--out", required=True, help="the SVG file to write")
    ap.add_argument("--json", help="also write the summary to this JSON file")
    ap.add_argument("--title", default="validation bits per token")
    a = ap.parse_args()
    models = []
    for i, spec in enumerate(a.models):
        label, sep, dirs = spec.partition("=")
        if not sep or not label or not dirs:
            sys.exit(f"plot_runs.py: '{spec}': expected LABEL=DIR[,DIR...]")
        models.append({"label": label, "colour": COLOURS[i % len(COLOURS)],
                       "runs": [read_run(d) for d in dirs.split(",") if d]})
    with open(a.out + ".tmp", "w") as f:
        f.write(render(models, a.title))
    os.replace(a.out + ".tmp", a.out)
    rows = summarize(models)
    print(markdown(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plot GEMM time against M, one subplot per (layer shape, scale kind), one line per backend.

Reads JSON arrays of records (plain or .gz) with at least m, n, k, scale, out, backend, config, us
(optional: model, layer, tp, routed), as written by either producer:
  * gemm_bench: one record per (problem, backend, config); each backend's line takes the fastest
    config at each M. Backend "floor" (config "read") is drawn as a dashed black weight-read floor.
  * fp8route bench: one record per (problem, backend), plus records with "routed": true (whatever
    their backend) that are drawn as one thick line labelled "routed".

  python3 bench/plot_bench.py decode_tp12.json [more.json ...] -o decode.png \
      [--layers llama-3.1-8b,o_proj] [--scale row] [--max-plots 12] [--title TEXT]

Needs matplotlib (exit 3 without it); bad input exits 2.
"""
import argparse
import gzip
import json
import math
import sys

REQUIRED = {"m": int, "n": int, "k": int, "scale": str, "out": str, "backend": str, "config": str,
            "us": (int, float)}
FLOOR, ROUTED = "floor (weight read)", "routed"


def die(msg, code=2):
    print(f"plot_bench.py: {msg}", file=sys.stderr)
    sys.exit(code)


def load(path):
    """Records of one file, checked for the required fields."""
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
            data = json.load(f)
    except FileNotFoundError:
        die(f"{path}: no such file")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        die(f"{path}: not valid JSON ({e})")
    if not isinstance(data, list):
        die(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    for i, r in enumerate(data):
        if not isinstance(r, dict):
            die(f"{path}: record {i} is not an object")
        for field, kind in REQUIRED.items():
            if field not in r:
                die(f"{path}: record {i} has no field '{field}'")
            if not isinstance(r[field], kind) or isinstance(r[field], bool):
                die(f"{path}: record {i} field '{field}' has the wrong type ({r[field]!r})")
    return data


def label(r):
    """The layer label of a record: 'model/layer tpN', else 'n=N k=K'."""
    if r.get("model") is None and r.get("layer") is None:
        return f"n={r['n']} k={r['k']}"
    s = "/".join(str(r[f]) for f in ("model", "layer") if r.get(f) is not None)
    return s + (f" tp{r['tp']}" if r.get("tp") is not None else "")


def group(records, layers, scales):
    """(label, n, k, scale, out) -> line name -> {m: fastest us}, keys in input order."""
    groups = {}
    for r in records:
        if scales and r["scale"] not in scales:
            continue
        lab = label(r)
        if layers and not any(s in lab for s in layers):
            continue
        if not math.isfinite(r["us"]) or r["us"] <= 0:
            continue  # failed or skipped measurement: nothing to draw on a log axis
        name = ROUTED if r.get("routed") else FLOOR if r["backend"] == "floor" else r["backend"]
        line = groups.setdefault((lab, r["n"], r["k"], r["scale"], r["out"]), {}).setdefault(name, {})
        line[r["m"]] = min(r["us"], line.get(r["m"], math.inf))
    return groups


def plot(groups, out_path, title, several_outs):
    try:
        import matplotlib
    except ImportError:
        die("matplotlib is not installed (pip install matplotlib)", 3)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogFormatter, NullLocator

    # One colour per backend, the same in every subplot; floor and routed have their own styles.
    names = [n for g in groups.values() for n in g if n not in (FLOOR, ROUTED)]
    palette = plt.get_cmap("tab10").colors
    rank = {n: i for i, n in enumerate(dict.fromkeys(names))}
    color = {n: palette[i % len(palette)] for n, i in rank.items()}

    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.5 * rows), squeeze=False)
    for ax, ((lab, n, k, scale, out), lines) in zip(axes.flat, groups.items()):
        ms = sorted({m for line in lines.values() for m in line})
        # Backends in one order everywhere, then routed, then the floor (drawn on top).
        order = sorted(lines, key=lambda x: (x == ROUTED, x == FLOOR, rank.get(x, 0)))
        for name in order:
            pts = sorted(lines[name].items())
            style = dict(marker="o", markersize=3, linewidth=1.2, color=color.get(name))
            if name == FLOOR:
                style.update(color="black", linestyle="--", marker=None)
            elif name == ROUTED:
                style.update(color="crimson", linewidth=3, markersize=5, alpha=0.8)
            ax.plot([m for m, _ in pts], [us for _, us in pts], label=name, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ms)
        ax.set_xticklabels([str(m) for m in ms], fontsize=8)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(LogFormatter())  # plain numbers (40, not 4x10^1)
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        ax.tick_params(axis="y", which="both", labelsize=8)
        shape = f"n={n} k={k}"
        head = shape if lab == shape else f"{lab}  {shape}"
        ax.set_title(f"{head}  {scale}" + (f" {out}" if several_outs else ""), fontsize=9)
        ax.set_xlabel("M", fontsize=8)
        ax.set_ylabel("time (µs)", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(out_path, dpi=120)
    except OSError as e:
        die(f"cannot write {out_path}: {e}")


def main():
    ap = argparse.ArgumentParser(description="Plot gemm_bench / fp8route bench JSON: time against M.")
    ap.add_argument("inputs", nargs="+", metavar="INPUT.json", help="JSON array of records (.gz ok)")
    ap.add_argument("-o", "--output", required=True, metavar="OUT.png")
    ap.add_argument("--layers", metavar="SUBSTR,...", help="comma-separated substrings; keep layers whose label has one")
    ap.add_argument("--scale", metavar="KIND,...", help="comma-separated scale kinds to keep (tensor,row,block)")
    ap.add_argument("--max-plots", type=int, metavar="N", default=12, help="at most this many subplots (12)")
    ap.add_argument("--title", metavar="TEXT", help="figure title")
    a = ap.parse_args()
    if a.max_plots < 1:
        die("--max-plots must be at least 1")

    split = lambda s: [x for x in s.split(",") if x] if s else []
    records = [r for path in a.inputs for r in load(path)]
    groups = group(records, split(a.layers), split(a.scale))
    if not groups:
        die("no records left after filtering")
    if len(groups) > a.max_plots:
        print(f"plot_bench.py: {len(groups) - a.max_plots} of {len(groups)} plots left out "
              f"(--max-plots {a.max_plots})", file=sys.stderr)
        groups = dict(list(groups.items())[:a.max_plots])
    several_outs = len({key[4] for key in groups}) > 1
    plot(groups, a.output, a.title, several_outs)
    print(f"wrote {a.output} ({len(groups)} plots)")


if __name__ == "__main__":
    main()

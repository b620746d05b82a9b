#!/usr/bin/env python3
"""Merge quantization benchmark records into one markdown table.

Reads one or more JSON files, each a list of records
  {"op", "layout", "T", "H", "impl", "us", "gbps", "bytes", "graph"}
as written by fp8route's C++ benchmark (impl "fp8route") and bench/quant_torch.py (impl
"torch_eager", "torch_compile"), and prints one row per (op, layout, T, H) with fp8route's time and
bandwidth next to PyTorch's, and the ratios torch time / fp8route time (> 1 means fp8route is
faster). Then, per op, the smallest ratio over the shapes and where it occurs. Op "floor" (quant_bench's
kernel that only reads the bf16 [T, H] and writes T * H bytes) shows, in the fp8route column, the
time no kernel moving those bytes can beat.

    python3 bench/quant_table.py bench/results/fp8route.json bench/results/torch.json
    python3 bench/quant_table.py --copy-gbps 4200 a.json b.json

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

OP_ORDER = ("floor", "group", "silu_group", "token", "tensor_dynamic")
LAYOUT_ORDER = (None, "row_major", "col_major", "col_major_tma", "ue8m0_tma")
IMPLS = ("fp8route", "torch_eager", "torch_compile")
DASH = "—"
NO_GRAPH = "†"


def load(paths):
    """{(op, layout, T, H): {impl: record}}; a later record for the same key and impl wins."""
    table = {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise SystemExit(f"quant_table: cannot read {path}: {exc}")
        if isinstance(data, dict) and "records" in data:
            data = data["records"]
        if not isinstance(data, list):
            raise SystemExit(f"quant_table: {path}: expected a JSON list of records")
        for i, r in enumerate(data):
            try:
                key = (str(r["op"]), r.get("layout"), int(r["T"]), int(r["H"]))
                impl = str(r["impl"])
                float(r["us"])
            except (KeyError, TypeError, ValueError, AttributeError):
                print(f"quant_table: {path}: record {i} skipped (missing op/T/H/impl/us)",
                      file=sys.stderr)
                continue
            slot = table.setdefault(key, {})
            if impl in slot:
                print(f"quant_table: {path}: duplicate {impl} {key}; keeping the later one",
                      file=sys.stderr)
            slot[impl] = r
    return table


def sort_key(key):
    op, layout, t, h = key
    opk = (OP_ORDER.index(op), "") if op in OP_ORDER else (len(OP_ORDER), op)
    lk = ((LAYOUT_ORDER.index(layout), "") if layout in LAYOUT_ORDER
          else (len(LAYOUT_ORDER), str(layout)))
    return (opk, lk, h, t)


def fmt_us(rec):
    if rec is None:
        return DASH
    us = float(rec["us"])
    s = f"{us:.2f}" if us < 1000 else f"{us:.0f}"
    return s + (NO_GRAPH if rec.get("graph") is False else "")


def fmt_num(v, digits=1):
    return DASH if v is None else f"{v:.{digits}f}"


def gbps_of(rec):
    if rec is None:
        return None
    if rec.get("gbps") is not None:
        return float(rec["gbps"])
    if rec.get("bytes") and float(rec["us"]) > 0:
        return float(rec["bytes"]) / (float(rec["us"]) * 1e3)
    return None


def ratio(num, den):
    if num is None or den is None:
        return None
    a, b = float(num["us"]), float(den["us"])
    if not (a > 0 and b > 0) or math.isinf(a) or math.isinf(b):
        return None
    return a / b


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="Markdown table of fp8route vs PyTorch quantization timings "
                    "(ratios > 1 mean fp8route is faster).")
    p.add_argument("files", nargs="+", help="JSON record files (fp8route's and quant_torch.py's)")
    p.add_argument("--copy-gbps", type=float, metavar="X",
                   help="add a column: fp8route GB/s as %% of X (e.g. a measured copy bandwidth); "
                        "without it, the GB/s of a \"copy\" record in the files is used if any")
    args = p.parse_args(argv)
    if args.copy_gbps is not None and not args.copy_gbps > 0:
        p.error("--copy-gbps must be positive")

    table = load(args.files)
    # fp8route's quant_bench also writes a device-to-device copy record: the bandwidth ceiling
    copy = [recs for key, recs in table.items() if key[0] == "copy"]
    table = {k: v for k, v in table.items() if k[0] != "copy"}
    copy_note = None
    if args.copy_gbps is None and copy:
        g = gbps_of(next(iter(copy[-1].values())))
        if g:
            args.copy_gbps = g
            copy_note = f"copy ceiling {g:.0f} GB/s from the copy record"
    if not table:
        print("quant_table: no records", file=sys.stderr)
        return 1
    keys = sorted(table, key=sort_key)

    cols = ["op", "layout", "T", "H", "fp8route µs", "fp8route GB/s"]
    if args.copy_gbps is not None:
        cols.append(f"% of {args.copy_gbps:.0f} GB/s")
    if copy_note:
        print(f"({copy_note})\n")
    cols += ["torch_eager µs", "torch_compile µs", "eager/fp8route", "compile/fp8route"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join(" --- " if i < 2 else " ---: " for i in range(len(cols))) + "|")

    any_no_graph = False
    mins = {}  # op -> {"eager": (ratio, key), "compile": (ratio, key)}
    for key in keys:
        op, layout, t, h = key
        recs = table[key]
        fr, ea, co = (recs.get(i) for i in IMPLS)
        any_no_graph |= any(r is not None and r.get("graph") is False for r in (fr, ea, co))
        g = gbps_of(fr)
        row = [op, layout if layout is not None else DASH, str(t), str(h), fmt_us(fr),
               fmt_num(g)]
        if args.copy_gbps is not None:
            row.append(DASH if g is None else f"{100.0 * g / args.copy_gbps:.0f}%")
        re_, rc = ratio(ea, fr), ratio(co, fr)
        row += [fmt_us(ea), fmt_us(co), fmt_num(re_, 2), fmt_num(rc, 2)]
        print("| " + " | ".join(row) + " |")
        m = mins.setdefault(op, {"eager": None, "compile": None})
        for name, r in (("eager", re_), ("compile", rc)):
            if r is not None and (m[name] is None or r < m[name][0]):
                m[name] = (r, key)

    if any_no_graph:
        print(f"\n{NO_GRAPH} timed without a CUDA graph (capture failed)")

    def where(entry):
        if entry is None:
            return DASH, DASH
        r, (_, layout, t, h) = entry
        return f"{r:.2f}", (f"{layout} " if layout else "") + f"T={t} H={h}"

    print("\nMinimum ratio per op (torch time / fp8route time; > 1 means fp8route is faster):\n")
    print("| op | min eager/fp8route | at | min compile/fp8route | at |")
    print("| --- | ---: | --- | ---: | --- |")
    for op in sorted(mins, key=lambda o: sort_key((o, None, 0, 0))):
        e_r, e_at = where(mins[op]["eager"])
        c_r, c_at = where(mins[op]["compile"])
        print(f"| {op} | {e_r} | {e_at} | {c_r} | {c_at} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

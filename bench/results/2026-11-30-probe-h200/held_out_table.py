#!/usr/bin/env python3
"""A routing table without some models: the shipped measurements (routes/h200-measurements.json) less
every (N, K) the named models have at any TP degree of the catalog, as test_route's held-out check
builds it, written as a tune raw file and turned into a table by `fp8route tune --build-only` (the
library's own table builder). For benching a held-out model on the GPU:

  bench/results/2026-11-30-probe-h200/held_out_table.py build/gpu/fp8route OUT.json deepseek-v3
  build/gpu/fp8route bench --model deepseek-v3 --tp 8 --table OUT.json [--probe unseen]
"""

import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def held_out_shapes(catalog, models):
    shapes = set()
    for model in models:
        if model not in catalog["models"]:
            sys.exit(f"held_out_table.py: unknown model '{model}' (shapes/models.json has {', '.join(catalog['models'])})")
        for layer in catalog["models"][model]:
            for tp in catalog["tp"]:
                n, k = layer["n"], layer["k"]
                if layer["parallel"] == "column":
                    if n % tp:
                        continue
                    n //= tp
                elif layer["parallel"] == "row":
                    if k % tp:
                        continue
                    k //= tp
                shapes.add((n, k))
    return shapes


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    tool, out, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    catalog = json.load(open(os.path.join(ROOT, "shapes", "models.json")))
    shapes = held_out_shapes(catalog, models)
    records = json.load(open(os.path.join(ROOT, "routes", "h200-measurements.json")))
    stamp = json.load(open(os.path.join(ROOT, "routes", "h200.json")))["stamp"]
    raw = out[:-5] + ".raw.jsonl" if out.endswith(".json") else out + ".raw.jsonl"
    problems, kept = {}, 0
    with open(raw, "w") as f:
        f.write(json.dumps({"stamp": stamp}) + "\n")
        for scale, dtype, n, k, m, backend, config, us in records:
            if (n, k) in shapes:
                continue
            f.write(json.dumps({"scale": scale, "out": dtype, "n": n, "k": k, "m": m, "backend": backend,
                                "config": config, "us": us, "min_us": us, "max_us": us}) + "\n")
            problems[(scale, dtype, n, k, m)] = True
            kept += 1
        for scale, dtype, n, k, m in problems:
            f.write(json.dumps({"done": True, "scale": scale, "out": dtype, "n": n, "k": k, "m": m}) + "\n")
    print(f"{len(shapes)} shapes of {', '.join(models)} held out: {kept} of {len(records)} measurements kept in {raw}")
    subprocess.run([tool, "tune", "--build-only", "--raw", raw, "-o", out], check=True)


if __name__ == "__main__":
    main()

"""The block tune of device call B without the wgmma configs the product dropped after it (the
ordered-issue loop, n160): their measurements are removed and the tune's per-problem records keep
the other candidates. python3 drop_configs.py callB_block_tune.raw.jsonl.gz tune_shipped.raw.jsonl.gz"""
import gzip
import json
import sys

DROPPED = {"n160_s5_c2_tma", "n128_s6_c2_tma_ord", "n128_s6_c1_tma_ord", "n160_s5_c2_tma_ord", "n192_s5_c2_tma_ord"}


def kept(backend, config):
    return not (backend == "wgmma" and config in DROPPED)


with gzip.open(sys.argv[1], "rt") as src, gzip.open(sys.argv[2], "wt") as dst:
    for line in src:
        r = json.loads(line)
        if "backend" in r and not kept(r["backend"], r["config"]):
            continue
        if r.get("done") and "final" in r:
            pairs = [(c, us) for c, us in zip(r["final"], r["final_full_us"]) if kept(*c)]
            r["final"], r["final_full_us"] = [c for c, _ in pairs], [us for _, us in pairs]
        if r.get("done") and "screened_out" in r:
            r["screened_out"] = [s for s in r["screened_out"] if kept(s[0], s[1])]
        dst.write(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n")

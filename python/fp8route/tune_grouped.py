"""Measures fp8route's grouped GEMM backends on the expert layers of mixture-of-experts models and
writes a grouped routing table (docs/moe.md, Routing), which grouped_scaled_mm then routes by
(FP8ROUTE_GROUPED_TABLE=FILE, or fp8route.load_grouped_table(FILE)).

  python3 -m fp8route.tune_grouped --out FILE [--models deepseek-v3,qwen3-30b-a3b,...]
        [--forms masked,contiguous] [--scales block,row,tensor] [--masked-rows 1,2,4,...]
        [--contiguous-rows 1,2,...,32768] [--backends decode,wgmma,cutlass] [--catalog models.json]
        [--seed 0] [--sets-max 8] [--full-margin 0.1|none] [--resume] [--dry-run]

One entry per (form, scale, E, N, K): each expert projection (gate_up, down) of each catalog model
and expert-parallel degree of its "moe" section, E being the experts one GPU holds (experts / ep).
At each rows the host sees (masked: M_max; contiguous: M_total), the device counts are drawn as a
step of that model routes: tokens each pick top_k distinct experts of all `experts`, uniformly; a GPU
holds the first experts / ep of them (EP rank 0). Masked: M_max tokens arrive, and each local expert
gets the tokens that picked it. Contiguous: tokens arrive until M_total rows land on the local
experts. Each rotation set draws its own routing (and activations); the weights are shared.

Every backend that runs the problem is timed side by side (fp8route._timing: CUDA graphs over the
rotation sets, interleaved replays, cold L2, median of 20). A masked point is timed a second time with
the experts as full as a call can make them (an expert-parallel rank: every local expert holding M_max
rows, as many ranks' tokens can; a layer whose experts are all local: top_k experts holding M_max rows,
the most its own M_max tokens can put on them), and only the backends within --full-margin (10%) of the
fastest there are written: a masked call's rows may spread unlike the model's routing, and the host
cannot see how. FILE, when it exists, is read first: its entries are kept and those measured again
are replaced, so a long tune can be run in parts (--resume skips the entries FILE already has, to go
on after a run was cut off). Progress goes to stderr, one line per point.
"""
import argparse
import json
import math
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT, VERSION = "fp8route-grouped-table", 1
MASKED_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTIGUOUS_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
BACKENDS = ("decode", "wgmma", "cutlass")


def catalog_path():
    """shapes/models.json: $FP8ROUTE_DATA_DIR, $FP8ROUTE_SOURCE_DIR, the package's folder, the source
    tree it sits in, as the library looks for its data files."""
    places = [os.environ.get("FP8ROUTE_DATA_DIR"), os.environ.get("FP8ROUTE_SOURCE_DIR"), _HERE,
              os.path.join(_HERE, "..", "..")]
    for p in places:
        if p and os.path.isfile(os.path.join(p, "shapes", "models.json")):
            return os.path.normpath(os.path.join(p, "shapes", "models.json"))
    raise FileNotFoundError("shapes/models.json not found (looked in FP8ROUTE_DATA_DIR, FP8ROUTE_SOURCE_DIR, the "
                            "package and its source tree); --catalog names it")


def layers(catalog, models=None):
    """(model, ep, experts, local experts, top_k, layer name, n, k) of the catalog's MoE section."""
    moe = catalog["moe"]["models"]
    unknown = sorted(set(models or ()) - set(moe))
    if unknown:
        raise ValueError(f"--models: {', '.join(unknown)} not in the catalog's moe section ({', '.join(moe)})")
    for model, m in moe.items():
        if models and model not in models:
            continue
        for ep in m["ep"]:
            if m["experts"] % ep:
                raise ValueError(f"{model}: {m['experts']} experts do not split over ep {ep}")
            for layer in m["layers"]:
                yield model, ep, m["experts"], m["experts"] // ep, m["top_k"], layer["name"], layer["n"], layer["k"]


def _picks(experts, top_k, tokens, gen):
    """[tokens, top_k] distinct experts per token, uniform."""
    import torch
    return torch.rand(tokens, experts, generator=gen).argsort(dim=1)[:, :top_k]


def masked_counts(experts, local, top_k, m_max, gen):
    """Rows of each of the `local` first experts when m_max tokens each pick top_k of `experts`."""
    import torch
    p = _picks(experts, top_k, m_max, gen).reshape(-1)
    return torch.bincount(p[p < local], minlength=local)[:local].to(torch.int32)


def contiguous_counts(experts, local, top_k, rows, gen):
    """Rows of each local expert when tokens arrive until `rows` rows land on the local experts."""
    import torch
    counts = torch.zeros(local, dtype=torch.int64)
    need = rows
    while need > 0:
        # Tokens enough for the rows still needed, in expectation, plus a margin.
        tokens = max(1, math.ceil(need * experts / (min(top_k, experts) * local) * 1.2))
        p = _picks(experts, top_k, tokens, gen).reshape(-1)
        p = p[p < local][:need]
        counts += torch.bincount(p, minlength=local)[:local]
        need -= p.numel()
    return counts.to(torch.int32)


def operands(form, scale, e, n, k, counts, m_max, b, sb):
    """One rotation set of a grouped call on weights b, sb (weights()): activations, their scales, the
    counts on the device (groups: offsets [E + 1] or masked_m [E]), the output, and kw, the counts as
    grouped_scaled_mm's keyword."""
    import torch
    dev, e4m3 = "cuda", torch.float8_e4m3fn
    kb = (k + 127) // 128
    if form == "masked":
        a = torch.randn(e, m_max, k, device=dev).clamp(-4, 4).to(e4m3)
        groups = counts.to(dev)
        t, lead = m_max, (e,)
    else:
        total = int(counts.sum())
        a = torch.randn(max(total, 1), k, device=dev).clamp(-4, 4).to(e4m3)
        groups = torch.cat([torch.zeros(1, dtype=torch.int32), counts.cumsum(0).to(torch.int32)]).to(dev)
        t, lead = max(total, 1), ()
    if scale == "row":
        sa = torch.rand(*lead, t, device=dev) + 0.5
    elif scale == "block":  # group quant's default layout (col_major_tma), f32
        sa = torch.rand(*lead, kb, (t + 3) // 4 * 4, device=dev) + 0.5
    else:
        sa = torch.rand(e, device=dev) + 0.5
    out = torch.empty(*a.shape[:-1], n, dtype=torch.bfloat16, device=dev)
    kw = dict(offsets=groups) if form == "contiguous" else dict(masked_m=groups)
    return dict(a=a, sa=sa, out=out, groups=groups, kw=kw, b=b, sb=sb)


def weights(scale, e, n, k):
    """Random E4M3 expert weights [E, N, K] and their scales of the given kind. Drawn a few experts at a
    time: DeepSeek-V3's 256 experts are 7.5 GB of codes, 30 GB as the float32 they are drawn from."""
    import torch
    b = torch.empty(e, n, k, dtype=torch.float8_e4m3fn, device="cuda")
    step = max(1, (1 << 28) // (n * k))  # 1 GiB of float32 at a time
    for i in range(0, e, step):
        b[i:i + step] = torch.randn(min(step, e - i), n, k, device="cuda").clamp_(-4, 4)
    if scale == "row":
        sb = torch.rand(e, n, device="cuda") + 0.5
    elif scale == "block":
        sb = torch.rand(e, (n + 127) // 128, (k + 127) // 128, device="cuda") + 0.5
    else:
        sb = torch.rand(e, device="cuda") + 0.5
    return b, sb


def full_counts(experts, local, top_k, m_max, gen):
    """The fullest experts a masked call of m_max rows per expert can be given. An expert-parallel
    rank (local < experts): every local expert holding m_max rows (many ranks' tokens may fill them).
    A layer whose experts are all here: its m_max tokens make m_max * top_k rows, at most m_max per
    expert, so at most top_k full experts (drawn at random); every expert full is out of its reach."""
    import torch
    if local < experts:
        return torch.full((local,), m_max, dtype=torch.int32)
    counts = torch.zeros(local, dtype=torch.int32)
    counts[torch.randperm(local, generator=gen)[:min(top_k, local)]] = m_max
    return counts


def measure_point(form, scale, e_global, local, top_k, n, k, rows, backends, gen, b, sb, sets_max, full=False):
    """{backend: us} at one rows, and {backend: why} for those that did not run. full: the masked
    form with every local expert holding M_max rows instead of the model's routing."""
    import fp8route
    from fp8route._timing import l2_bytes, time_interleaved
    draw = full_counts if full else masked_counts if form == "masked" else contiguous_counts
    first = draw(e_global, local, top_k, rows, gen)
    active = int((first > 0).sum())
    read = active * n * k + int(first.sum()) * k  # the active weights and the activations
    sets = max(1, min(math.ceil(3 * l2_bytes() / max(read, 1)), sets_max))
    counts = [first] + [draw(e_global, local, top_k, rows, gen) for _ in range(sets - 1)]
    data = [operands(form, scale, local, n, k, c, rows, b, sb) for c in counts]

    def op(backend):
        def call(i):
            s = data[i]
            fp8route.grouped_scaled_mm(s["a"], s["b"], s["sa"], s["sb"], scale=scale, out=s["out"], backend=backend,
                                       **s["kw"])
        return call

    errors = {}
    times = time_interleaved({be: op(be) for be in backends}, sets, errors=errors)
    mean_rows = float(sum(int(c.sum()) for c in counts)) / max(1, sum(int((c > 0).sum()) for c in counts))
    return times, errors, mean_rows


def robust(routed, full, margin):
    """The backends of `routed` ({backend: us}, the model's routing) whose time with every expert
    full is within 1 + margin of the fastest there: a masked call's rows may spread unlike the
    model's routing, and the host cannot see how."""
    if not full:
        return dict(routed)
    best = min(full.values())
    return {be: us for be, us in routed.items() if be in full and full[be] <= best * (1 + margin)}


def read_table(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        t = json.load(f)
    if t.get("format") != FORMAT or t.get("version") != VERSION:
        raise ValueError(f"{path}: not a {FORMAT} version {VERSION} file")
    return t


def entry_key(e):
    return (e["form"], e["scale"], e.get("out", "bf16"), e["experts"], e["n"], e["k"])


def merge(old_entries, new_entries):
    """old entries, each replaced by a new one of the same key, then the new ones not in old."""
    new = {entry_key(e): e for e in new_entries}
    out = [new.pop(entry_key(e), e) for e in old_entries]
    return out + list(new.values())


def write_table(path, stamp, entries):
    """The format load_grouped_table reads (one measurement a line)."""
    lines = ["{", f'"format": {json.dumps(FORMAT)},', f'"version": {VERSION},', f'"stamp": {json.dumps(stamp)},',
             '"entries": [']
    for i, e in enumerate(entries):
        head = {key: e[key] for key in ("form", "scale", "out", "experts", "n", "k", "source")}
        rows = ",\n  ".join(json.dumps([m[0], m[1], float(m[2])]) for m in e["measured"])
        lines.append(json.dumps(head)[:-1] + ',\n "measured": [\n  ' + rows + "]}" +
                     ("," if i + 1 < len(entries) else ""))
    lines += ["]", "}"]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def _ints(s, name):
    try:
        v = [int(x) for x in s.split(",") if x]
    except ValueError:
        raise SystemExit(f"{name}: a comma-separated list of positive integers, got {s!r}")
    if not v or min(v) < 1:
        raise SystemExit(f"{name}: a comma-separated list of positive integers, got {s!r}")
    return sorted(set(v))


def _names(s, allowed, name):
    v = [x for x in s.split(",") if x]
    bad = [x for x in v if x not in allowed]
    if not v or bad:
        raise SystemExit(f"{name}: one or more of {', '.join(allowed)}, got {s!r}")
    return v


def plan(args):
    """The points to measure: (entry head, e_global, local, top_k, rows list)."""
    with open(args.catalog or catalog_path()) as f:
        catalog = json.load(f)
    models = [m for m in args.models.split(",") if m] if args.models else None
    seen = set()
    for model, ep, experts, local, top_k, name, n, k in layers(catalog, models):
        for form in args.forms:
            for scale in args.scales:
                if scale == "block" and k % 128:
                    continue
                head = dict(form=form, scale=scale, out="bf16", experts=local, n=n, k=k,
                            source=f"{model} ep{ep} {name} top_k {top_k} uniform")
                if entry_key(head) in seen:  # two models with the same layer: the first measures it
                    continue
                seen.add(entry_key(head))
                rows = args.masked_rows if form == "masked" else args.contiguous_rows
                yield head, experts, local, top_k, rows


def _built_backends():
    from ._native import lib
    return {str(b) for b in lib.grouped_backends()}


def _machine_stamp():
    """This GPU's stamp (device 0, today), as the routing tables carry it."""
    from ._native import lib, plain
    return plain(lib.machine_stamp())


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m fp8route.tune_grouped", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the grouped routing table to write (read first if it exists)")
    ap.add_argument("--models", default="", help="catalog MoE models (default: all)")
    ap.add_argument("--forms", default="masked,contiguous")
    ap.add_argument("--scales", default="block,row,tensor")
    ap.add_argument("--masked-rows", default=",".join(map(str, MASKED_ROWS)), help="M_max values")
    ap.add_argument("--contiguous-rows", default=",".join(map(str, CONTIGUOUS_ROWS)), help="M_total values")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="grouped backends to time (simt: the slow reference)")
    ap.add_argument("--catalog", default="", help="shapes/models.json (default: found as the library finds its data)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sets-max", type=int, default=8, help="rotation sets at most (each its own routing)")
    ap.add_argument("--full-margin", default="0.1",
                    help="masked entries keep only the backends within 1 + this of the fastest with every expert "
                         "holding M_max rows (also measured); 'none' keeps every backend and skips that measurement")
    ap.add_argument("--resume", action="store_true", help="skip the entries --out already has")
    ap.add_argument("--dry-run", action="store_true", help="list the entries and rows, measure nothing")
    args = ap.parse_args(argv)
    args.forms = _names(args.forms, ("masked", "contiguous"), "--forms")
    args.scales = _names(args.scales, ("block", "row", "tensor"), "--scales")
    args.masked_rows = _ints(args.masked_rows, "--masked-rows")
    args.contiguous_rows = _ints(args.contiguous_rows, "--contiguous-rows")
    if args.sets_max < 1:
        raise SystemExit(f"--sets-max: at least 1, got {args.sets_max}")
    try:
        args.full_margin = None if args.full_margin == "none" else float(args.full_margin)
    except ValueError:
        raise SystemExit(f"--full-margin: a fraction >= 0 or 'none', got {args.full_margin!r}")
    if args.full_margin is not None and not 0 <= args.full_margin < math.inf:
        raise SystemExit(f"--full-margin: a fraction >= 0 or 'none', got {args.full_margin!r}")
    try:
        points = list(plan(args))
    except (OSError, ValueError) as e:
        raise SystemExit(str(e))
    if args.dry_run:
        for head, experts, local, top_k, rows in points:
            print(f"{head['form']} {head['scale']} e={local} n={head['n']} k={head['k']} ({head['source']}): "
                  f"rows {','.join(map(str, rows))}")
        return 0

    import torch
    if not torch.cuda.is_available():
        raise SystemExit("tune_grouped: no CUDA device (torch.cuda.is_available() is False)")
    backends = _names(",".join(b for b in args.backends.split(",") if b), sorted(_built_backends()), "--backends")
    try:
        old = read_table(args.out)
    except (OSError, ValueError) as e:
        raise SystemExit(f"--out: {e}")
    stamp = _machine_stamp()
    if old and old["stamp"]["gpu"] != stamp["gpu"]:
        raise SystemExit(f"--out: {args.out} was measured on {old['stamp']['gpu']}, this is {stamp['gpu']}")
    entries = old["entries"] if old else []
    if args.resume:
        have_keys = {entry_key(e) for e in entries}
        points = [p for p in points if entry_key(p[0]) not in have_keys]
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    total = sum(len(p[4]) for p in points)
    done = 0
    for head, experts, local, top_k, rows in points:
        b, sb = weights(head["scale"], local, head["n"], head["k"])
        measured = []
        for r in rows:
            times, errors, mean_rows = measure_point(head["form"], head["scale"], experts, local, top_k, head["n"],
                                                     head["k"], r, backends, gen, b, sb, args.sets_max)
            full = {}
            if head["form"] == "masked" and args.full_margin is not None and len(times) > 1:
                full, _, _ = measure_point("masked", head["scale"], experts, local, top_k, head["n"], head["k"], r,
                                           list(times), gen, b, sb, args.sets_max, full=True)
            kept = robust(times, full, args.full_margin or 0.0)
            done += 1
            ranked = sorted(kept.items(), key=lambda kv: kv[1])
            measured += [[r, be, us] for be, us in ranked]
            print(f"[{done}/{total} {time.time() - t0:.0f}s] {head['form']} {head['scale']} e={local} n={head['n']} "
                  f"k={head['k']} rows={r} ({mean_rows:.1f} per active expert): " +
                  ", ".join(f"{be} {us:.2f}" for be, us in sorted(times.items(), key=lambda kv: kv[1])) +
                  ("; every expert full: " + ", ".join(f"{be} {us:.2f}" for be, us in
                                                       sorted(full.items(), key=lambda kv: kv[1])) if full else "") +
                  "".join(f"; {be} left out (over the margin when full)" for be in times if be not in kept) +
                  "".join(f"; {be} not run ({why})" for be, why in errors.items()), file=sys.stderr, flush=True)
        del b, sb
        torch.cuda.empty_cache()
        if measured:
            entries = merge(entries, [dict(head, measured=measured)])
            write_table(args.out, stamp, entries)  # after each entry: a cut-off run keeps what it measured
    print(f"tune_grouped: {len(points)} entries, {done} points in {time.time() - t0:.0f} s -> {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

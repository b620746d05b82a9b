"""Kernel-by-kernel timeline of one graph-replayed decode step (torch.profiler / CUPTI)."""
import argparse, collections, gzip, json, os, sys, time
import torch
sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
import e2e  # noqa: E402  (MODELS)
from fp8route.models import llama as L  # noqa: E402
from torch.profiler import profile, ProfilerActivity  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="llama-3.1-8b")
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--act", default="row")
ap.add_argument("--variant", default="fp8route")
ap.add_argument("--kv-len", type=int, default=1024)
ap.add_argument("--out", required=True)
a = ap.parse_args()
entry = e2e.MODELS[a.model]
cfg = L.LlamaConfig.from_hf(dict(entry["config"]))
tp = entry["tp"]
w = L.RankWeights.random(cfg, rank=0, world=tp, seed=0, weight_format="channel", device="cuda")
backend, _, attention = a.variant.partition(":")
m = L.LlamaModel(cfg, w, backend=backend, act=a.act, device="cuda", max_batch=a.batch, max_seq=a.kv_len + 1,
                 skip_collectives=tp > 1, attention=attention or None, l2_prefetch=int(os.environ.get("PF_MB", "0")) << 20)
step = m.capture_decode(a.batch)
step.positions.fill_(a.kv_len)
for _ in range(20):
    step.replay()
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
times = []
for _ in range(20):
    s.record(); step.replay(); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
times.sort()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        step.replay()
        torch.cuda.synchronize()
        time.sleep(0.01)
path = a.out + ".trace.json"
prof.export_chrome_trace(path)
tr = json.load(open(path))
ks = [ev for ev in tr["traceEvents"] if ev.get("cat") == "kernel"]
ks.sort(key=lambda ev: ev["ts"])
# split into replays by gaps > 1 ms
reps, cur = [], []
for ev in ks:
    if cur and ev["ts"] - (cur[-1]["ts"] + cur[-1]["dur"]) > 1000:
        reps.append(cur); cur = []
    cur.append(ev)
reps.append(cur)
r = reps[-1]
span = r[-1]["ts"] + r[-1]["dur"] - r[0]["ts"]
busy = sum(ev["dur"] for ev in r)
short = lambda n: n.split("<")[0].split("(")[0][-60:]
agg = collections.OrderedDict()
for i, ev in enumerate(r):
    nm = short(ev["name"])
    gap = ev["ts"] - (r[i - 1]["ts"] + r[i - 1]["dur"]) if i else 0.0
    d = agg.setdefault(nm, [0, 0.0, 0.0])
    d[0] += 1; d[1] += ev["dur"]; d[2] += gap
with open(a.out + ".txt", "w") as f:
    print(f"{a.model} {a.variant} act={a.act} batch={a.batch}: event-timed step median {times[len(times)//2]*1e3:.1f} us "
          f"(min {times[0]*1e3:.1f}); profiled replays {len(reps)}, kernels in last {len(r)}, span {span:.1f} us, "
          f"kernel busy {busy:.1f} us, gaps {span - busy:.1f} us; weight bytes {m.weight_bytes()/1e9:.3f} GB", file=f)
    print(f"{'kernel':62s} {'n':>4s} {'sum us':>9s} {'mean us':>8s} {'gap-before us':>13s}", file=f)
    for nm, (n, t, g) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{nm:62s} {n:4d} {t:9.1f} {t/n:8.2f} {g:13.1f}", file=f)
    print("\nlayer 1 sequence (kernel, dur us, gap before us, grid):", file=f)
    per = (len(r) - 4) // cfg.num_hidden_layers if cfg.num_hidden_layers else 0
    for i, ev in enumerate(r):
        if i < 3 + 2 * per or i >= len(r) - 6:
            gap = ev["ts"] - (r[i - 1]["ts"] + r[i - 1]["dur"]) if i else 0.0
            print(f"{i:4d} {short(ev['name']):60s} {ev['dur']:8.2f} {gap:7.2f} {ev['args'].get('grid')}", file=f)
os.system(f"gzip -f {path}")
print(open(a.out + ".txt").read())

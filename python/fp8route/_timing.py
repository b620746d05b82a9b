"""The benchmark method in Python (docs/benchmarks.md), shared by the benchmarks under bench/ and
fp8route.tune_grouped: each op captured in a CUDA graph over rotation sets of inputs, the ops'
replays interleaved in a shuffled order with an untimed L2 flush before each, the median of the
replays. Needs torch with CUDA."""
import math
import random
import statistics

import torch


def l2_bytes():
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 60 << 20)


def rotation_sets(nbytes):
    return int(min(max(math.ceil(3 * l2_bytes() / max(1, nbytes)), 3), 512))


def time_interleaved(ops, sets, reps=20, warmup=5, errors=None):
    """ops: {name: fn(set_index)}. Returns {name: median us per call}. With an `errors` dict, an op
    that raises while being set up is left out and its first error line kept there, else it raises."""
    flush = torch.empty(2 * l2_bytes() // 4, dtype=torch.float32, device="cuda")
    graphs = {}
    for name, fn in ops.items():
        try:
            for i in range(sets):  # first calls outside capture (workspaces, torch.compile)
                fn(i)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(sets):
                    fn(i)
            graphs[name] = g
        except Exception as e:
            if errors is None:
                raise
            errors[name] = str(e).splitlines()[0][:120]
    for _ in range(warmup):
        for g in graphs.values():
            g.replay()
    times = {name: [] for name in graphs}
    rng = random.Random(12345)
    names = list(graphs)
    events = []
    for _ in range(reps):
        rng.shuffle(names)
        for name in names:
            flush.sum()  # untimed: the previous op's dirty lines are written back here
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[name].replay()
            end.record()
            events.append((name, start, end))
    torch.cuda.synchronize()
    for name, start, end in events:
        times[name].append(start.elapsed_time(end) * 1000.0 / sets)
    return {name: statistics.median(v) for name, v in times.items()}

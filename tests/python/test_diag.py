"""bench/recurring_misses.py on made-up bench runs of three GPUs (no GPU or binary needed)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
A, B = "row_64x16x128_1x1x1_pingpong_swapab", "row_128x16x128_1x1x1_coop_streamk_swapab"


def bench_run(path, rows):
    """rows: (layer, n, m, routed config, routed us, {config: us} of the CUTLASS configs alone)."""
    records = []
    for layer, n, m, routed, routed_us, alone in rows:
        key = {"model": "llama-3.1-8b", "tp": 1, "layer": layer, "scale": "row", "m": m, "n": n, "k": 4096,
               "out": "bf16"}
        records.append({**key, "backend": "cutlass_sm90", "config": routed, "us": routed_us, "routed": True})
        records += [{**key, "backend": "cutlass_sm90", "config": c, "us": us, "routed": False}
                    for c, us in alone.items()]
    path.write_text(json.dumps(records))
    return str(path)


def test_recurring_misses_separates_draws_repeats_and_steady_losses(tmp_path):
    # The table picks A at M = 16 for both shapes (it measured A faster).
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"entries": [
        {"scale": "row", "out": "bf16", "n": n, "k": 4096, "breakpoints": [[16, "cutlass_sm90", A]],
         "measured": [[16, "cutlass_sm90", A, 10.0], [16, "cutlass_sm90", B, 10.5]]}
        for n in (4096, 6144)]}))
    # o_proj (4096): A loses 5% to B on GPUs x and y, wins on z. qkv_proj (6144): A 2.5% behind on all
    # three, never more than 3%. GPU w routed qkv to B (an older table): it does not count there.
    o_lost = ("o_proj", 4096, 16, A, 10.5, {A: 10.5, B: 10.0})
    qkv_behind = ("qkv_proj", 6144, 16, A, 10.25, {A: 10.25, B: 10.0})
    runs = [f"x={bench_run(tmp_path / 'x.json', [o_lost, qkv_behind])}",
            f"y={bench_run(tmp_path / 'y.json', [o_lost, qkv_behind])}",
            f"z={bench_run(tmp_path / 'z.json', [('o_proj', 4096, 16, A, 10.0, {A: 10.0, B: 10.2}), qkv_behind])}",
            f"w={bench_run(tmp_path / 'w.json', [('qkv_proj', 6144, 16, B, 10.0, {A: 9.0, B: 10.0})])}"]
    tool = os.path.join(ROOT, "bench", "recurring_misses.py")
    r = subprocess.run([sys.executable, tool, "--table", str(table), *runs], capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    assert lines[0].endswith("lost more than 1.03x: 0: 1, 2: 1"), lines[0]
    assert any(line.startswith("2 of 3  llama-3.1-8b TP 1 o_proj row M = 16") and "x*=1.050" in line
               and "z=1.000" in line for line in lines), r.stdout
    steady = [line for line in lines if "qkv_proj" in line]
    assert len(steady) == 1 and steady[0].startswith("1.025  ") and "w=" not in steady[0], r.stdout
    assert lines[-1] == "  fp8route tune --model llama-3.1-8b --tp 1 --m 16 --scale row", r.stdout
    # A bad argument names itself.
    bad = subprocess.run([sys.executable, tool, "x"], capture_output=True, text=True)
    assert bad.returncode != 0 and "run 'x': expected LABEL=PATH" in bad.stderr

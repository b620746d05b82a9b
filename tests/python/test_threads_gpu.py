"""Host threads on their own torch streams, from Python: every fp8route call of a thread runs on that
thread's current stream (tvm-ffi carries torch's current stream per thread), and threads running
different problems at once, each with a dynamic per-tensor quant every fourth call, get the bits
each problem gives alone."""
import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tests use it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fp8route  # noqa: E402
from fp8route.ops import lib  # noqa: E402

PROBLEMS = [(1, 4096, 4096, "row"), (4, 6144, 4096, "row"), (16, 4096, 14336, "tensor"), (32, 28672, 4096, "row"),
            (64, 4096, 4096, "block"), (128, 1024, 8192, "row"), (256, 14336, 4096, "tensor"),
            (1000, 4096, 4096, "row")]


def operands(m, n, k, kind, gen):
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda", generator=gen) * 0.1).to(torch.float8_e4m3fn)
    if kind == "tensor":
        sa, sb = torch.rand(1, device="cuda", generator=gen) + 0.5, torch.rand(1, device="cuda", generator=gen) + 0.5
    elif kind == "row":
        sa, sb = torch.rand(m, device="cuda", generator=gen) + 0.5, torch.rand(n, device="cuda", generator=gen) + 0.5
    else:
        kb, nb = (k + 127) // 128, (n + 127) // 128
        sa = torch.rand(kb, (m + 3) // 4 * 4, device="cuda", generator=gen) + 0.5
        sb = torch.rand(nb, kb, device="cuda", generator=gen) + 0.5
    return a, w, sa, sb


def test_each_thread_runs_on_its_own_current_stream():
    seen, errors = {}, []

    def work(i):
        try:
            s = torch.cuda.Stream()
            x = torch.randn(8, 256, device="cuda")
            with torch.cuda.stream(s):
                got = [lib.call_stream(x) for _ in range(50)]
                fp8route.per_tensor_quant(x)  # a call through the package's own path
                got.append(lib.call_stream(x))
            seen[i] = (s.cuda_stream, set(got))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, (want, got) in seen.items():
        assert got == {want}, f"thread {i}: calls ran on {got}, its stream is {want}"


@pytest.mark.parametrize("rounds", [3])
def test_threads_on_their_own_streams_get_the_bits_they_get_alone(rounds):
    gen = torch.Generator(device="cuda").manual_seed(43)
    cases = [operands(*p, gen) for p in PROBLEMS]
    want = [fp8route.scaled_mm(a, w, sa, sb, out_dtype=torch.bfloat16, scale=p[3])
            for (a, w, sa, sb), p in zip(cases, PROBLEMS)]
    xq = [torch.randn(64, 1024, device="cuda", generator=gen) for _ in PROBLEMS]
    want_q = [fp8route.per_tensor_quant(x) for x in xq]
    torch.cuda.synchronize()
    for _ in range(rounds):
        diffs, errors = [0] * len(PROBLEMS), []

        def work(i):
            try:
                s = torch.cuda.Stream()
                a, w, sa, sb = cases[i]
                out = torch.empty_like(want[i])
                with torch.cuda.stream(s):
                    # Counted on the device, read once at the end: no host sync between the calls.
                    bad = torch.zeros((), dtype=torch.int64, device="cuda")
                    for rep in range(100):
                        out.fill_(float("nan"))
                        fp8route.scaled_mm(a, w, sa, sb, out_dtype=torch.bfloat16, scale=PROBLEMS[i][3], out=out)
                        bad += (out.view(torch.int16) != want[i].view(torch.int16)).sum()
                        if rep % 4 == 3:
                            q, sc = fp8route.per_tensor_quant(xq[i])
                            bad += (q.view(torch.uint8) != want_q[i][0].view(torch.uint8)).sum()
                            bad += (sc != want_q[i][1]).sum()
                s.synchronize()
                diffs[i] = int(bad)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(f"thread {i}: {e!r}")

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(PROBLEMS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert diffs == [0] * len(PROBLEMS), list(zip(PROBLEMS, diffs))

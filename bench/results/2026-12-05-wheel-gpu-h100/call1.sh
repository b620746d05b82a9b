#!/bin/bash
# Device (about 1 minute; carry .stage with the repaired wheel fp8route-*.whl and build/gpu/python's
# apache_tvm_ffi wheel): the published-form wheel pip-installed beside the machine's pip torch
# (no source tree, no FP8ROUTE_* variables), imported (a) as is and (b) with the system loader's
# cuBLASLt hidden by a tmpfs mount, so that only the NVIDIA pip wheel's copy can be found; each prints
# the cuBLASLt mapped into the process and checks scaled_mm and the vLLM/SGLang drop-ins against torch.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/wheel1
mkdir -p $R
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/wheel1.tgz -C /tmp wheel1; }
# The engine drop-ins against fp8route's own functions, bit for bit, from the source tree's package.
PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$W/build/gpu/python/fp8route/_fp8route_ffi.so \
  t engines 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_engines_compat.py tests/python/test_engine_tests.py
tail -3 $R/engines.txt
{ python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.__file__)"
  python3 -m pip list 2>/dev/null | grep -i -E "^torch |nvidia-cublas|nvidia-cuda-runtime"
  ldconfig -p | grep cublasLt; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $R/env.txt 2>&1
# Installed into the environment torch lives in (the machine's torch is a venv: /opt/torch/.venv).
PY=$(python3 -c "import sys; print(sys.executable)")
t install 60 $PY -m pip install --no-index --no-deps --force-reinstall .stage/fp8route-*.whl build/gpu/python/apache_tvm_ffi-*.whl
cat > /tmp/wcheck.py <<'PY'
import sys, torch, fp8route
from fp8route.engines import sglang, vllm
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcublasLt" in l})
print("fp8route", fp8route.__version__, "from", fp8route.__file__); print("cuBLASLt mapped:", libs)
torch.manual_seed(0); bad = 0
def check(what, fn):
    global bad
    try:
        ok, info = fn()
    except Exception as e:  # a failure to report, not to stop the other checks
        ok, info = False, f"{type(e).__name__}: {e}"
    print(f"{what}: {'ok' if ok else 'FAIL'} {info}"); bad += not ok
for m, n, k in [(1, 4096, 4096), (16, 6144, 4096), (300, 1024, 2048)]:
    a = torch.randn(m, k, device="cuda"); w = (torch.randn(n, k, device="cuda") / 8).to(torch.float8_e4m3fn)
    sb = torch.rand(n, 1, device="cuda") + 0.5
    qa, sa = vllm.scaled_fp8_quant(a, use_per_token_if_dynamic=True)
    ref = torch._scaled_mm(qa, w.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
    def mm():
        got = fp8route.scaled_mm(qa, w.t(), sa, sb.t(), out_dtype=torch.bfloat16)
        err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        return err < 2e-2, f"max err / max |ref| {err:.2e}"
    def quant():
        amax = a.abs().amax(1, keepdim=True).clamp_min(1e-10)   # docs/numerics.md: s = amax/448 correctly rounded (torch's tensor / scalar on CUDA multiplies by the reciprocal), q = sat(x * (448/amax))
        q_ref = (a * (448.0 / amax)).clamp(-448, 448).to(torch.float8_e4m3fn)
        ndiff = (qa.view(torch.uint8) != q_ref.view(torch.uint8)).sum().item()
        return sa.shape == (m, 1) and torch.equal(sa, (amax.double() / 448.0).float()) and ndiff == 0, \
            f"scale shape {tuple(sa.shape)}, {ndiff} codes differ"
    def drop_mm():
        eng = vllm.cutlass_scaled_mm(qa, w.t(), sa, sb, torch.bfloat16)
        sg = sglang.fp8_scaled_mm(qa, w.t(), sa, sb, torch.bfloat16)
        own = fp8route.scaled_mm(qa, w.t(), sa, sb.t(), out_dtype=torch.bfloat16)
        return torch.equal(eng, own) and torch.equal(sg, own), "vllm.cutlass_scaled_mm, sglang.fp8_scaled_mm == scaled_mm"
    def sg_quant():
        q2, s2 = sglang.sglang_per_token_quant_fp8(a)
        return s2.shape == (m, 1) and torch.equal(s2, sa) and torch.equal(q2.view(torch.uint8), qa.view(torch.uint8)), \
            f"scale shape {tuple(s2.shape)}"
    for what, fn in [("scaled_mm vs torch._scaled_mm", mm), ("vllm.scaled_fp8_quant per token vs torch", quant),
                     ("engine GEMM drop-ins", drop_mm), ("sglang per-token quant == vllm's", sg_quant)]:
        check(f"M={m} N={n} K={k} {what}", fn)
sys.exit(1 if bad else 0)
PY
cd /tmp
t import_as_is 120 env -u PYTHONPATH -u FP8ROUTE_FFI_LIB -u FP8ROUTE_SOURCE_DIR -u LD_LIBRARY_PATH $PY /tmp/wcheck.py
# The system loader's copy hidden: a private mount namespace with a tmpfs over its folder.
SYS=$(ldconfig -p | awk '/libcublasLt.so.13 /{print $NF; exit}')
echo "system cuBLASLt: ${SYS:-none}" >> $R/env.txt
if [ -n "$SYS" ]; then
  t import_hidden 120 unshare -m sh -c "mount -t tmpfs none $(dirname $(readlink -f $SYS)) && mount -t tmpfs none $(dirname $SYS) ; \
    ls $(dirname $SYS) | head -3; env -u PYTHONPATH -u FP8ROUTE_FFI_LIB -u FP8ROUTE_SOURCE_DIR -u LD_LIBRARY_PATH $PY /tmp/wcheck.py"
fi
cat $R/env.txt $R/import_*.txt | tail -30; snap

"""fp8route.engines against the engines' own conventions: each drop-in's parameters (names, order,
defaults) equal those of the vLLM or SGLang function it replaces, written out below as the engines
declare them (vLLM: model_executor/layers/quantization/utils/fp8_utils.py and _custom_ops.py;
SGLang: srt/layers/quantization/fp8_kernel.py and sgl_kernel); bad arguments are ValueErrors naming
the argument (CPU, before any tensor is touched); and on a GPU each drop-in's results equal
fp8route's own functions bit for bit, in the engines' shapes and views. Needs the native module
(skips otherwise); the defaults that are torch dtypes are compared only where torch is installed,
and the numeric tests skip without torch or a GPU, each with its reason."""
import inspect

import pytest

fp8route = pytest.importorskip("fp8route", exc_type=ImportError)  # the native module (or cuBLASLt) missing
from fp8route.engines import _common, sglang, vllm  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

REQUIRED = inspect.Parameter.empty
FP8 = torch.float8_e4m3fn if torch is not None else "torch.float8_e4m3fn"  # SGLang's fp8_dtype on CUDA

ENGINE_SIGNATURES = {
    # vLLM
    (vllm, "per_token_group_quant_fp8"): [
        ("x", REQUIRED), ("group_size", REQUIRED), ("eps", 1e-10), ("dtype", None), ("column_major_scales", False),
        ("tma_aligned_scales", False), ("out_q", None), ("use_ue8m0", None)],
    (vllm, "scaled_fp8_quant"): [
        ("input", REQUIRED), ("scale", None), ("num_token_padding", None), ("scale_ub", None),
        ("use_per_token_if_dynamic", False), ("output", None)],
    (vllm, "cutlass_scaled_mm"): [
        ("a", REQUIRED), ("b", REQUIRED), ("scale_a", REQUIRED), ("scale_b", REQUIRED), ("out_dtype", REQUIRED),
        ("bias", None)],
    # SGLang
    (sglang, "per_token_group_quant_fp8"): [
        ("x", REQUIRED), ("group_size", REQUIRED), ("eps", 1e-10), ("dtype", FP8), ("column_major_scales", False),
        ("scale_tma_aligned", False), ("scale_ue8m0", False)],
    (sglang, "per_token_group_quant_8bit"): [
        ("x", REQUIRED), ("group_size", REQUIRED), ("dst_dtype", REQUIRED), ("eps", 1e-10),
        ("column_major_scales", False), ("scale_tma_aligned", False), ("scale_ue8m0", False),
        ("fuse_silu_and_mul", False), ("masked_m", None)],
    (sglang, "sglang_per_token_group_quant_fp8"): [
        ("x", REQUIRED), ("group_size", REQUIRED), ("eps", 1e-10), ("column_major_scales", False),
        ("scale_tma_aligned", False), ("scale_ue8m0", False), ("fuse_silu_and_mul", False), ("masked_m", None),
        ("enable_v2", None)],
    (sglang, "sglang_per_token_group_quant_8bit"): [
        ("x", REQUIRED), ("group_size", REQUIRED), ("dst_dtype", REQUIRED), ("eps", 1e-10),
        ("column_major_scales", False), ("scale_tma_aligned", False), ("scale_ue8m0", False),
        ("fuse_silu_and_mul", False), ("masked_m", None), ("enable_v2", None)],
    (sglang, "sglang_per_token_quant_fp8"): [("x", REQUIRED), ("dtype", FP8)],
    (sglang, "scaled_fp8_quant"): [
        ("input", REQUIRED), ("scale", None), ("num_token_padding", None), ("use_per_token_if_dynamic", False)],
    (sglang, "fp8_scaled_mm"): [
        ("mat_a", REQUIRED), ("mat_b", REQUIRED), ("scales_a", REQUIRED), ("scales_b", REQUIRED),
        ("out_dtype", REQUIRED), ("bias", None)],
}


def _id(key):
    module, name = key
    return f"{module.__name__.rsplit('.', 1)[-1]}.{name}"


@pytest.mark.parametrize("key", list(ENGINE_SIGNATURES), ids=_id)
def test_signature_is_the_engines(key):
    module, name = key
    params = list(inspect.signature(getattr(module, name)).parameters.values())
    assert [p.name for p in params] == [n for n, _ in ENGINE_SIGNATURES[key]]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
    for p, (n, default) in zip(params, ENGINE_SIGNATURES[key]):
        if isinstance(default, str) and default.startswith("torch."):
            assert p.default == default[len("torch."):], n  # without torch: the dtype's name
        else:
            assert p.default == default and type(p.default) is type(default), n


def test_every_drop_in_is_listed():
    for module in (vllm, sglang):
        for name in module.__all__:
            assert (module, name) in ENGINE_SIGNATURES, f"{module.__name__}.{name}: no engine signature in this test"


class NotATensor:
    """An argument no check below may reach: the option errors come before x is looked at."""
    shape = property(lambda self: pytest.fail("x was read before the options were checked"))


X = NotATensor()


@pytest.mark.parametrize("call, name", [
    (lambda: vllm.per_token_group_quant_fp8(X, 128, column_major_scales="true"), "column_major_scales"),
    (lambda: vllm.per_token_group_quant_fp8(X, 128, tma_aligned_scales=1), "tma_aligned_scales"),
    (lambda: vllm.per_token_group_quant_fp8(X, 128, use_ue8m0="pow2"), "use_ue8m0"),
    (lambda: vllm.per_token_group_quant_fp8(X, 128, dtype="bf16"), "dtype"),
    (lambda: vllm.per_token_group_quant_fp8(X, 128, dtype="int8"), "dtype"),  # vLLM's is FP8 only
    (lambda: vllm.per_token_group_quant_fp8(X, 128, dtype=["fp8"]), "dtype"),  # unhashable: no TypeError
    (lambda: vllm.per_token_group_quant_fp8(X, 128, eps=1e-6), "eps"),
    (lambda: vllm.per_token_group_quant_fp8(X, "128"), "group_size"),
    (lambda: vllm.scaled_fp8_quant(X, use_per_token_if_dynamic="yes"), "use_per_token_if_dynamic"),
    (lambda: vllm.scaled_fp8_quant(X, scale_ub=1.0), "scale_ub"),
    (lambda: sglang.per_token_group_quant_fp8(X, 128, scale_ue8m0="ue8m0"), "scale_ue8m0"),
    (lambda: sglang.per_token_group_quant_fp8(X, 128, scale_tma_aligned=None), "scale_tma_aligned"),
    (lambda: sglang.per_token_group_quant_8bit(X, 128, "uint8"), "dst_dtype"),
    (lambda: sglang.sglang_per_token_group_quant_fp8(X, 128, fuse_silu_and_mul="no"), "fuse_silu_and_mul"),
    (lambda: sglang.sglang_per_token_group_quant_fp8(X, 128, enable_v2="v2"), "enable_v2"),
    (lambda: sglang.sglang_per_token_quant_fp8(X, dtype="e5m2"), "dtype"),
])
def test_bad_options_name_the_argument(call, name):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value).startswith(name + ":"), str(e.value)


@pytest.mark.parametrize("spelling", ["fp8", "float8_e4m3fn", "e4m3", None, "torch.float8_e4m3fn"])
def test_fp8_spellings(spelling):
    assert _common.code(spelling) == "e4m3"


def test_torch_dtype_spellings():
    if torch is None:
        pytest.skip("torch is not installed: torch dtypes cannot be spelled")
    assert _common.code(torch.float8_e4m3fn) == "e4m3"
    assert _common.code(torch.int8, int8=True) == "i8"
    with pytest.raises(ValueError, match="^dtype:"):
        _common.code(torch.float8_e5m2)


@pytest.mark.parametrize("spelling", ["fp8", "float8_e4m3fn", "e4m3"])
def test_fp8routes_own_functions_take_the_spellings(spelling):
    # quant_layout runs on the CPU: the same answer for every spelling, a ValueError (no KeyError)
    # for a bad one.
    assert fp8route.quant_layout(8, 256, dtype=spelling) == fp8route.quant_layout(8, 256)
    with pytest.raises(ValueError, match="^dtype:"):
        fp8route.quant_layout(8, 256, dtype="fp4")


# ------------------------------------------------------------------------------------------------
# GPU: the drop-ins against fp8route's own functions
# ------------------------------------------------------------------------------------------------

def _gpu():
    if torch is None:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return torch.device("cuda")


def _bits(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(_bits(a), _bits(b))


@pytest.mark.parametrize("tokens", [1, 5, 64])
@pytest.mark.parametrize("col, tma", [(False, False), (True, False), (True, True)])
def test_vllm_group_quant_matches_fp8route(tokens, col, tma):
    dev = _gpu()
    x = torch.randn(tokens, 512, device=dev, dtype=torch.bfloat16) * 3
    q, s = vllm.per_token_group_quant_fp8(x, 128, column_major_scales=col, tma_aligned_scales=tma)
    layout = "row_major" if not col else ("col_major_tma" if tma else "col_major")
    q0, s0 = fp8route.per_token_group_quant(x, 128, layout=layout)
    _same(q, q0)
    want = s0 if not col else s0.t()[:tokens]
    _same(s, want)
    assert s.shape == (tokens, 4)
    if col:
        assert s.stride() == (1, ((tokens + 3) // 4 * 4) if tma else tokens)


def test_vllm_group_quant_ue8m0_and_out_q():
    dev = _gpu()
    x = torch.randn(7, 256, device=dev, dtype=torch.bfloat16)
    out_q = torch.empty(7, 256, device=dev, dtype=torch.float8_e4m3fn)
    q, s = vllm.per_token_group_quant_fp8(x, 128, out_q=out_q, use_ue8m0=True)
    q0, s0 = fp8route.per_token_group_quant(x, 128, rounding="pow2")
    assert q is out_q
    _same(q, q0)
    _same(s, s0)


def test_vllm_group_quant_3d_x():
    dev = _gpu()
    x = torch.randn(2, 3, 256, device=dev, dtype=torch.float16)
    q, s = vllm.per_token_group_quant_fp8(x, 128)
    q0, s0 = fp8route.per_token_group_quant(x.reshape(6, 256), 128)
    assert q.shape == (2, 3, 256) and s.shape == (2, 3, 2)
    _same(q.reshape(6, 256), q0)
    _same(s.reshape(6, 2), s0)


@pytest.mark.parametrize("padding", [None, 16])
def test_scaled_fp8_quant_matches_fp8route(padding):
    dev = _gpu()
    x = torch.randn(5, 384, device=dev, dtype=torch.bfloat16)
    rows = max(padding or 0, 5)
    for fn in (vllm.scaled_fp8_quant, sglang.scaled_fp8_quant):
        q, s = fn(x, num_token_padding=padding, use_per_token_if_dynamic=True)
        q0, s0 = fp8route.per_token_quant(x)
        assert q.shape == (rows, 384) and s.shape == (rows, 1)
        _same(q[:5], q0)
        _same(s[:5, 0], s0)
        q, s = fn(x, num_token_padding=padding)
        q0, s0 = fp8route.per_tensor_quant(x)
        assert s.shape == (1,)
        _same(q[:5], q0)
        _same(s, s0)
        scale = torch.tensor([0.25], device=dev)
        q, s = fn(x, scale, num_token_padding=padding)
        assert s is scale
        _same(q[:5], fp8route.per_tensor_quant(x, scale)[0])


def test_sglang_per_token_quant_matches_fp8route():
    dev = _gpu()
    x = torch.randn(9, 256, device=dev, dtype=torch.bfloat16)
    q, s = sglang.sglang_per_token_quant_fp8(x)
    q0, s0 = fp8route.per_token_quant(x)
    assert s.shape == (9, 1)
    _same(q, q0)
    _same(s[:, 0], s0)


@pytest.mark.parametrize("fused", [False, True])
def test_sglang_group_quant_matches_fp8route(fused):
    dev = _gpu()
    x = torch.randn(6, 512 * (2 if fused else 1), device=dev, dtype=torch.bfloat16)
    q, s = sglang.sglang_per_token_group_quant_fp8(x, 128, column_major_scales=True, scale_tma_aligned=True,
                                                   scale_ue8m0=True, fuse_silu_and_mul=fused)
    fn = fp8route.silu_and_mul_per_token_group_quant if fused else fp8route.per_token_group_quant
    q0, s0 = fn(x, 128, rounding="pow2", storage="ue8m0_packed", layout="col_major_tma")
    _same(q, q0)
    assert s.dtype == torch.int32 and s.shape == (6, 1) and s.stride() == (1, 8)
    _same(s, s0.t()[:6])


def test_sglang_masked_group_quant_matches_fp8route():
    dev = _gpu()
    x = torch.randn(3, 8, 256, device=dev, dtype=torch.bfloat16)
    masked_m = torch.tensor([8, 3, 0], device=dev, dtype=torch.int32)
    q, s = sglang.sglang_per_token_group_quant_fp8(x, 128, column_major_scales=True, scale_tma_aligned=True,
                                                   masked_m=masked_m)
    q0, s0 = fp8route.masked_per_token_group_quant(x, masked_m, 128, layout="col_major_tma")
    assert q.shape == (3, 8, 256) and s.shape == (3, 8, 2)
    for e, m in enumerate(masked_m.tolist()):
        _same(q[e, :m], q0[e, :m])
        _same(s[e, :m], s0[e].t()[:m])


def test_scaled_mm_drop_ins_match_fp8route():
    dev = _gpu()
    x = torch.randn(16, 256, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(384, 256, device=dev) / 4).to(torch.float8_e4m3fn)
    w_s = torch.rand(384, 1, device=dev) + 0.5
    q, x_s = vllm.scaled_fp8_quant(x, use_per_token_if_dynamic=True)
    want = fp8route.scaled_mm(q, w, x_s, w_s, out_dtype=torch.bfloat16)
    _same(vllm.cutlass_scaled_mm(q, w.t(), x_s, w_s, torch.bfloat16), want)
    _same(sglang.fp8_scaled_mm(q, w.t(), x_s, w_s, torch.bfloat16), want)

"""The execution backends of the decoder: its linear layers, and the norms and quantizations that
feed them ("fp8route", "torch_fp8", "bf16", "ref"; llama.py's docstring describes each)."""
import torch
import torch.nn.functional as F

from ..weight_quant import BLOCK, FP8_MAX
from .weights import LinearWeight

BACKENDS = ("fp8route", "torch_fp8", "bf16", "ref")
_ACTS = ("row", "block", "tensor")


def _weight_kind(backend, act):
    """The LinearWeight kind (and dense dtype) a backend runs."""
    if backend == "ref":
        return "dense", torch.float32
    if backend == "bf16":
        return "dense", torch.bfloat16
    if backend == "torch_fp8":
        return "channel", None
    return ("block" if act == "block" else "rowwise"), None


def _rms_norm(h, w, eps):
    """RMSNorm as HF Llama computes it: in float32, rounded to h's dtype, then times the weight."""
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(h.dtype)


def _silu_mul(gu):
    i = gu.shape[-1] // 2
    return F.silu(gu[..., :i]) * gu[..., i:]


class _DenseLinear:
    def __init__(self, lw, dtype):
        self.w = lw.w.to(dtype)
        self.bias = None if lw.bias is None else lw.bias.to(dtype)
        self.nbytes = LinearWeight("dense", self.w, None, self.bias).nbytes()

    def __call__(self, x):
        return F.linear(x, self.w, self.bias)


class _TorchBackend:
    """ref (float32) and bf16: plain torch."""

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype

    def linear(self, lw):
        return _DenseLinear(lw.convert("dense", self.dtype), self.dtype)

    def norm(self, x, residual, w, eps):
        h = x if residual is None else x + residual
        return _rms_norm(h, w, eps), h

    def norm_linear(self, x, residual, w, eps, lin):
        y, h = self.norm(x, residual, w, eps)
        return lin(y), h

    def silu_linear(self, gu, lin):
        return lin(_silu_mul(gu))

    def linear_call(self, x, lin):
        return lin(x)


def _tq_row(x):
    """Per-token E4M3 quantization in torch: s = amax / 448 per row ([M, 1] f32, what
    torch._scaled_mm's row-wise scale_a takes), codes = x * (448 / amax) clamped to +-448."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=1e-10)
    q = (xf * (FP8_MAX / amax)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, amax / FP8_MAX


def _tq_norm_first(x, w, eps):
    return _tq_row(_rms_norm(x, w, eps))


def _tq_norm_add(x, residual, w, eps):
    h = x + residual
    q, s = _tq_row(_rms_norm(h, w, eps))
    return q, s, h


def _tq_silu(gu):
    return _tq_row(_silu_mul(gu))


def _t_norm_add(x, residual, w, eps):
    h = x + residual
    return _rms_norm(h, w, eps), h


_COMPILED = {}


def _compiled(fn, compile_):
    if not compile_:
        return fn
    if fn not in _COMPILED:
        # dynamic=True: one graph for every token count (batch sizes and prompt lengths) instead
        # of a recompilation per new M.
        _COMPILED[fn] = torch.compile(fn, dynamic=True)
    return _COMPILED[fn]


class _ScaledMmLinear:
    """torch._scaled_mm with row-wise scales: a [M, K] e4m3 with scale_a [M, 1] f32, b = W^T
    ([K, N] column-major, the transposed view of the row-major [N, K] weight) with scale_b [1, N]
    f32, out bf16."""

    def __init__(self, lw):
        lw = lw.convert("channel")
        self.w = lw.w
        self.wt = lw.w.t()
        self.scale_b = lw.scale.reshape(1, -1)
        self.bias = None if lw.bias is None else lw.bias.to(torch.bfloat16)
        self.nbytes = lw.nbytes()

    def quantized(self, q, s):
        y = torch._scaled_mm(q, self.wt, scale_a=s, scale_b=self.scale_b, out_dtype=torch.bfloat16)
        if isinstance(y, tuple):  # torch < 2.4 returned (out, amax)
            y = y[0]
        return y if self.bias is None else y + self.bias


class _TorchFp8Backend:
    name, dtype = "torch_fp8", torch.bfloat16

    def __init__(self, compile_=True):
        self.quant = _compiled(_tq_row, compile_)
        self.norm_first = _compiled(_tq_norm_first, compile_)
        self.norm_add = _compiled(_tq_norm_add, compile_)
        self.silu = _compiled(_tq_silu, compile_)
        self.final_norm = _compiled(_t_norm_add, compile_)

    def linear(self, lw):
        return _ScaledMmLinear(lw)

    def norm(self, x, residual, w, eps):
        if residual is None:
            return _rms_norm(x, w, eps), x
        return self.final_norm(x, residual, w, eps)

    def norm_linear(self, x, residual, w, eps, lin):
        if residual is None:
            q, s = self.norm_first(x, w, eps)
            return lin.quantized(q, s), x
        q, s, h = self.norm_add(x, residual, w, eps)
        return lin.quantized(q, s), h

    def silu_linear(self, gu, lin):
        q, s = self.silu(gu)
        return lin.quantized(q, s)

    def linear_call(self, x, lin):
        q, s = self.quant(x)
        return lin.quantized(q, s)


class _Fp8RouteLinear:
    def __init__(self, mod, input_scale, nbytes):
        self.mod, self.input_scale, self.nbytes = mod, input_scale, nbytes

    def __call__(self, x):
        return self.mod(x)


class _Fp8RouteBackend:
    """Fp8Linear layers fed by fp8route's fused norm + quant ops (torch.ops.fp8route, capturable).
    The norm weights are the model's, written at load time: static_weight=True lets each norm kernel
    load its weight while the kernel before it finishes (programmatic dependent launch)."""
    name, dtype = "fp8route", torch.bfloat16

    def __init__(self, act):
        import fp8route  # the native library: loaded only when this backend is used
        from fp8route.linear import Fp8Linear
        self.act, self.fp8route, self.Fp8Linear, self.ops = act, fp8route, Fp8Linear, torch.ops.fp8route

    def linear(self, lw):
        lw = lw.convert("block" if self.act == "block" else "rowwise")
        bias = None if lw.bias is None else lw.bias.to(torch.bfloat16)
        mod = self.Fp8Linear(lw.w, lw.scale, act=self.act, out_dtype=torch.bfloat16, bias=bias)
        return _Fp8RouteLinear(mod, lw.input_scale if self.act == "tensor" else None, lw.nbytes())

    def norm(self, x, residual, w, eps):
        y, h = self.ops.rms_norm(x, w, eps, residual, True)
        return y, (x if residual is None else h)

    def norm_linear(self, x, residual, w, eps, lin):
        if self.act == "row":
            q, s, h = self.ops.rms_norm_per_token_quant(x, w, eps, residual, "e4m3", "none", True)
        elif self.act == "block":
            q, s, h = self.ops.rms_norm_per_token_group_quant(x, w, eps, residual, BLOCK, "e4m3", "none", "f32",
                                                              "col_major_tma", True)
        elif lin.input_scale is not None:  # static per-tensor scale: fused
            s = lin.input_scale
            r = self.fp8route.rms_norm_per_tensor_quant(x, w, s, eps, residual=residual, static_weight=True)
            q, h = r if residual is not None else (r, x)
        else:  # dynamic per-tensor: the amax needs the whole tensor first, so no fused form
            y, h = self.norm(x, residual, w, eps)
            return lin(y), h
        return lin.mod.forward_quantized(q, s), (x if residual is None else h)

    def silu_linear(self, gu, lin):
        if self.act == "block":
            q, s = self.ops.per_token_group_quant(gu, BLOCK, "e4m3", "none", "f32", "col_major_tma", True)
            return lin.mod.forward_quantized(q, s)
        if self.act == "row":
            q, s = self.ops.per_token_quant(gu, "e4m3", "none", True)
            return lin.mod.forward_quantized(q, s)
        # Per-tensor scales (a whole-tensor amax first, or a static scale) have no fused form:
        # torch's silu_and_mul, then the layer quantizes.
        return self.linear_call(_silu_mul(gu), lin)

    def linear_call(self, x, lin):
        if lin.input_scale is not None:
            q, _ = self.fp8route.per_tensor_quant(x, scale=lin.input_scale)
            return lin.mod.forward_quantized(q, lin.input_scale)
        return lin(x)


def _make_backend(name, act, compile_):
    if name not in BACKENDS:
        raise ValueError(f"backend: one of {BACKENDS}, got {name!r}")
    if act not in _ACTS:
        raise ValueError(f"act: one of {_ACTS}, got {act!r}")
    if name == "ref":
        return _TorchBackend("ref", torch.float32)
    if name == "bf16":
        return _TorchBackend("bf16", torch.bfloat16)
    if name == "torch_fp8":
        return _TorchFp8Backend(compile_)
    return _Fp8RouteBackend(act)

"""Fp8Linear: a torch.nn.Module over a LinearPlan (bf16/fp16 activations in, quantized on the fly,
multiplied by the routed FP8 GEMM)."""
import torch

from . import ops, torch_ops
from ._native import lib, plain
from .ops import _bits, _compiling
from .torch_ops import linear_forward
from .weight_quant import quantize_weight

_ACTS = ("row", "tensor", "block")


class Fp8Linear(torch.nn.Module):
    """y = x @ W^T (+ bias) with W in FP8 E4M3.

    Fp8Linear(weight, weight_scale, act="row", out_dtype=torch.bfloat16, bias=None, accum=None,
              use_fast_accum=None):
      weight float8_e4m3fn [N, K] on a CUDA device; weight_scale f32: one element (per-tensor
      checkpoint), [N] (per channel), or [ceil(N/128), ceil(K/128)] (128x128 blocks, act="block").
      act: how activations are quantized per call: "row" (per token), "tensor" (dynamic per
      tensor), "block" (1x128 groups; K % 128 == 0).
      accum: "fast" (None, the default: every backend config may run the layer) or "precise" (only
      configs that sum each 128 of K in fp32); use_fast_accum=True/False is torch._scaled_mm's
      spelling of the same choice (both given must agree).
    Fp8Linear.from_float(weight, act=..., ...): quantizes a bf16/fp16/f32 weight itself (per channel,
      or 128x128 blocks for act="block").
    forward(x) quantizes x itself; forward_quantized(q, s) takes codes and scales a fused producer
      wrote (rms_norm_per_token_quant and the like).

    The plan is made once here (which backends can run the layer, the scale forms they need, the
    routing table's slice); forward looks up M. Build the module on the device it will run on: the
    plan holds the weight's device pointer, so moving the module afterwards is refused.
    `plan` is the fp8route.LinearPlan (freed with the module's last reference to it); the torch
    ops name it by `plan_key`, an integer no other plan of the process gets (torch_ops.py says why).
    """

    def __init__(self, weight, weight_scale, act="row", out_dtype=torch.bfloat16, bias=None, accum=None,
                 use_fast_accum=None):
        super().__init__()
        if act not in _ACTS:
            raise ValueError(f"act: one of {_ACTS}, got {act!r}")
        self.accum = ops._accum(accum, use_fast_accum)
        if weight.dtype != torch.float8_e4m3fn:
            raise ValueError(f"weight: float8_e4m3fn [N, K] expected, got {weight.dtype} (use Fp8Linear.from_float)")
        self.act = act
        self.out_dtype = out_dtype
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale.to(torch.float32).contiguous())
        self.register_buffer("bias", bias)
        self._ptr = weight.data_ptr()
        self.plan = lib.linear_plan_create(ops._bits(weight), self.weight_scale, act, ops._out_name(out_dtype), bias,
                                           self.accum)
        self.plan_key = torch_ops.plan_key(self.plan)
        # What an eager call reads, fixed with the plan: N and K (the C++ plan took a 2-D weight) without
        # the buffer lookup of nn.Module.__getattr__, and forward's arguments in one attribute (each
        # attribute read of a Module goes through its __getattr__ hook's slow path).
        self._n, self._k = weight.shape
        self._eager = (self.plan, self._n, act, out_dtype)

    @classmethod
    def from_float(cls, weight, act="row", out_dtype=torch.bfloat16, bias=None, accum=None, use_fast_accum=None):
        # Per channel through the library's per-token kernel (one scale per output row), so the
        # codes are those the GPU quantization makes; 128x128 blocks in torch (weight_quant.py).
        if act == "block":
            q, s = quantize_weight(weight, "block")
        else:
            q, s = quantize_weight(weight, "channel", method="kernel")
        return cls(q, s, act, out_dtype, bias, accum, use_fast_accum)

    def forward(self, x):
        if _compiling():  # traced: the op, which a graph holds (eager: no dispatcher)
            return torch.ops.fp8route.linear(x, self.weight, self.plan_key, self.act, self.out_dtype)
        plan, n, act, out_dtype = self._eager
        return linear_forward(plan, x, n, act, out_dtype)

    def forward_quantized(self, q, s):
        """The GEMM on activations quantized already, for a producer that fuses the quantization
        (fp8route.rms_norm_per_token_quant, silu_and_mul_per_token_group_quant, ...): q e4m3 [M, K],
        s f32 as `act` needs it: [M] per token (act="row"); one element (act="tensor", a dynamic
        or static per-tensor scale); 1x128 group scales (act="block") in every form scaled_mm takes:
        [ceil(K/128), align(M, 4)] (the col_major_tma layout) or its transpose view, read in place,
        or any other [M, ceil(K/128)] view (the row_major layout), gathered on the stream. Returns
        [M, N] in out_dtype; the C++ plan checks the scale's shape against the act kind (a
        ValueError naming the scale)."""
        if q.dim() != 2:
            raise ValueError(f"q: expected [M, {self._k}], got {tuple(q.shape)}")
        m, k = q.shape
        if k != self._k:
            raise ValueError(f"q: expected [M, {self._k}], got {tuple(q.shape)}")
        if _compiling():
            return torch.ops.fp8route.linear_quantized(q, s, self.weight, self.plan_key, self.out_dtype)
        # linear_quantized_forward (the op's implementation) inlined: q's shape is read once per call
        plan, n, _, out_dtype = self._eager
        y = torch.empty(size=(m, n), dtype=out_dtype, device=q.device)
        plan.run(_bits(q), s, y)
        return y

    def route(self, m):
        """The backend/config a call with m rows runs."""
        return str(self.plan.route(m))

    def probe(self, m_grid=None, top=5, always=False):
        """Times this layer's routing candidates on this GPU and routes by those times from then on
        (LinearPlan::probe): at the M of m_grid (default 1..4096, the catalog's grid) where the table has
        no exact entry for the layer's shape, or at every M with always=True. Load-time work: call it
        before forward() and before capturing graphs. Returns the timings, a list of dicts (m, n, k,
        scale, out, backend, config, us); empty when no M needed one. fp8route.save_table(path, timings)
        keeps them for the next process."""
        return plain(self.plan.probe(ops._m_grid(m_grid), int(top), bool(always)))

    def explain(self, m):
        return str(self.plan.explain(m))

    def _apply(self, fn, *args, **kwargs):
        moved = super()._apply(fn, *args, **kwargs)
        if getattr(self, "plan", None) is not None and self.weight.data_ptr() != self._ptr:
            raise RuntimeError("Fp8Linear: the plan holds the weight's device memory; build the module on the "
                               "device it runs on instead of moving it")
        return moved

    def extra_repr(self):
        return f"in_features={self.weight.shape[1]}, out_features={self.weight.shape[0]}, act={self.act}, " \
               f"out_dtype={self.out_dtype}, accum={self.accum}"

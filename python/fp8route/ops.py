"""The fp8route ops on DLPack tensors. Outputs are allocated on the input's device when the input
is a torch tensor and out= is not given; with other frameworks pass out=. Work runs on the
framework's current CUDA stream. E4M3 tensors may be torch.float8_e4m3fn or uint8 bit patterns.
Traced by torch.compile, each function calls its torch.ops.fp8route op (torch_ops.py) instead, which a
graph can hold; run eagerly, it calls the native module directly (no dispatcher on the way)."""
import functools

from ._native import lib, plain

try:
    import torch
except ImportError:  # the ops still work on any DLPack tensor, given out=
    torch = None

# An eager call's Python work is host time on every call (eager prefill pays it; bench/python_bench.py
# --overhead measures it), so the eager paths allocate with torch.empty(size=...) (the keyword form
# parses faster than a positional shape) and precomputed dtypes, read a tensor's shape and device
# once, pass float8 tensors as they are where DLPack carries them (_bits), and test the common case,
# `type(x) is _Tensor`, before the general checks.
_Tensor = torch.Tensor if torch is not None else ()  # isinstance(x, ()) is False


# True while torch.compile traces the caller (the call must then be a torch op), else False; dynamo
# reads this very function as a constant. About 0.1 us per eager call.
_compiling = torch.compiler.is_compiling if torch is not None else (lambda: False)


def _into(out, results):
    """A traced call's results, copied into out= where given (a tensor, or a tuple of them)."""
    if out is None:
        return results
    if isinstance(results, tuple):
        for o, r in zip(out, results):
            o.copy_(r)
        return tuple(out)
    return out.copy_(results)


_CODE_DTYPES = {"e4m3": "float8_e4m3fn", "i8": "int8"}
# Every spelling of a quant function's dtype -> "e4m3" or "i8": fp8route's names, the C++ parser's
# ("fp8", "float8_e4m3fn"), torch's names and torch dtypes.
_CODES = {"e4m3": "e4m3", "fp8": "e4m3", "float8_e4m3fn": "e4m3", "i8": "i8", "int8": "i8"}
if torch is not None:
    _CODES.update({torch.float8_e4m3fn: "e4m3", torch.int8: "i8"})


def _code(dtype):
    """A quant function's dtype as "e4m3" or "i8" (each public function tests the default, "e4m3",
    inline first); ValueError naming dtype otherwise."""
    try:
        code = _CODES.get(dtype)
    except TypeError:  # unhashable
        code = None
    if code is None:
        raise ValueError(f"dtype: \"e4m3\" (also \"fp8\", \"float8_e4m3fn\", torch.float8_e4m3fn) or \"i8\" "
                         f"(\"int8\", torch.int8), got {dtype!r}")
    return code


_OUT_NAMES = {"bf16": "bf16", "bfloat16": "bf16", "f16": "f16", "float16": "f16", "half": "f16"}
if torch is not None:
    _TORCH_OUT = {"bf16": torch.bfloat16, "f16": torch.float16}
    _TORCH_DTYPES = {"float8_e4m3fn": torch.float8_e4m3fn, "int8": torch.int8, "f32": torch.float32,
                     "i32": torch.int32, "bf16": torch.bfloat16, "f16": torch.float16}
    _F32 = torch.float32
    # out_dtype forms read without the general parse (None: the default, bf16)
    _OUT_FAST = {None: "bf16", "bf16": "bf16", "f16": "f16", torch.bfloat16: "bf16", torch.float16: "f16"}
else:
    _TORCH_OUT = _TORCH_DTYPES = {}
    _OUT_FAST = {None: "bf16", "bf16": "bf16", "f16": "f16"}


def _is_torch(x):
    return isinstance(x, _Tensor)


def _float8_passes():
    """Whether torch float8_e4m3fn tensors reach the native module as float8_e4m3fn over DLPack (torch
    exports that code, tvm-ffi carries it: the C++ side takes it as E4M3), checked once by a round
    trip of an empty tensor through a tvm-ffi call; if not, they go as a uint8 view of their bits."""
    if torch is None:
        return False
    try:
        import tvm_ffi
        t = torch.empty(0, dtype=torch.float8_e4m3fn)
        back = tvm_ffi.get_global_func("ffi.Array")(t)[0]
        return str(tvm_ffi.from_dlpack(t).dtype) == "float8_e4m3fn" and back.dtype == torch.float8_e4m3fn
    except Exception:  # an older torch or tvm-ffi: the uint8 view
        return False


def _view_bits(t):
    """float8_e4m3fn torch tensors as their uint8 bits (the C++ side reads uint8 as E4M3)."""
    if _is_torch(t) and t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8)
    return t


def _as_is(t):
    return t


# What the native module gets for an E4M3 tensor: the tensor itself where float8_e4m3fn passes over
# DLPack (no view per call), else its uint8 bits.
_bits = _as_is if _float8_passes() else _view_bits


def _out_name(out_dtype):
    if torch is not None and isinstance(out_dtype, torch.dtype):
        out_dtype = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(out_dtype, str(out_dtype))
    name = _OUT_NAMES.get(str(out_dtype))
    if name is None:
        raise ValueError(f"out_dtype: bf16 or f16 (torch.bfloat16 / torch.float16), got {out_dtype!r}")
    return name


_NOT_TORCH = "out: required when the input is not a torch tensor (fp8route allocates with torch)"


def _empty(like, shape, dtype, zero=False):
    if not _is_torch(like):
        raise ValueError(_NOT_TORCH)
    return (torch.zeros if zero else torch.empty)(size=tuple(shape), dtype=_TORCH_DTYPES[dtype], device=like.device)


@functools.lru_cache(maxsize=4096, typed=True)
def _layout(tokens, hidden, group_size, dtype, rounding, storage, layout, experts):
    lay = lib.quant_layout(group_size, dtype, rounding, storage, layout, tokens, hidden, experts)
    return tuple(lay["q"]), tuple(lay["s"]), str(lay["s_dtype"])


def quant_layout(tokens, hidden, group_size=128, dtype="e4m3", rounding="none", storage="f32",
                 layout="row_major", experts=0):
    """Shapes of the codes and scales of quantizing x [T, H] (or [E, T, H] with experts=E):
    {"q": [...], "s": [...], "s_dtype": "f32" | "i32"} (the one layout function of the C++ library;
    a pure function of its arguments, so answers are cached)."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    q, s, s_dtype = _layout(tokens, hidden, group_size, dtype, rounding, storage, layout, experts)
    return {"q": list(q), "s": list(s), "s_dtype": s_dtype}


def _group_outputs(x, tokens, hidden, experts, group_size, dtype, rounding, storage, layout, out, zero=False,
                   batched=False):
    if out is not None:
        return out
    # batched (the masked form): [E, ...] outputs even for E = 0, where quant_layout's experts=0
    # would mean unbatched; one expert's layout with the expert dim 0.
    q, s, s_dtype = _layout(tokens, hidden, group_size, dtype, rounding, storage, layout,
                            max(experts, 1) if batched else experts)
    if batched and experts == 0:
        q, s = (0,) + q[1:], (0,) + s[1:]
    return _empty(x, q, _CODE_DTYPES[dtype], zero), _empty(x, s, s_dtype, zero)


def _check_ndim(x, ndim, name, form):
    """The rank check of a public function (which tests `type(x) is _Tensor and x.dim() == ndim`
    inline first, the common case, and calls this otherwise)."""
    if len(x.shape) != ndim:
        raise ValueError(f"{name}: expected {form}, got shape {tuple(x.shape)}")


# Each public function checks what torch.compile's tracing needs (ranks), then either calls its
# torch op (traced) or the eager form below, which the torch op's implementation calls too.

def _group_hidden(x, group_size, fused):
    """H of a group quant's x: its last dim, or half of it in the fused form ([gate | up]); checked
    here, before the outputs are laid out, so that the error names x (as the C++ check does)."""
    cols = x.shape[-1]
    if fused and cols % 2:
        raise ValueError(f"x: the fused silu_and_mul form takes [.., 2 x hidden] ([gate | up]): its last dim must be "
                         f"even, got {cols}")
    hidden = cols // 2 if fused else cols
    if isinstance(group_size, int) and group_size > 0 and hidden % group_size:
        half = f" (half the last dim {cols}: [gate | up])" if fused else ""
        raise ValueError(f"x: hidden = {hidden}{half} must be a multiple of group_size {group_size}")
    return hidden


def _group_quant(x, group_size, dtype, rounding, storage, layout, out, fused):
    hidden = _group_hidden(x, group_size, fused)
    q, s = _group_outputs(x, x.shape[0], hidden, 0, group_size, dtype, rounding, storage, layout, out)
    lib.per_token_group_quant(x, _bits(q), s, group_size, dtype, rounding, storage, layout, fused)
    return q, s


def per_token_group_quant(x, group_size=128, dtype="e4m3", rounding="none", storage="f32", layout="row_major",
                          out=None):
    """x [T, H] -> (q [T, H], s): one scale per group of `group_size` along H (see quant_layout)."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        return _into(out, torch.ops.fp8route.per_token_group_quant(x, group_size, dtype, rounding, storage, layout,
                                                                   False))
    return _group_quant(x, group_size, dtype, rounding, storage, layout, out, False)


def silu_and_mul_per_token_group_quant(x, group_size=128, dtype="e4m3", rounding="none", storage="f32",
                                       layout="row_major", out=None):
    """x [T, 2H] -> silu(x[:, :H]) * x[:, H:] quantized per group: (q [T, H], s)."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, 2H]")
    if _compiling():
        return _into(out, torch.ops.fp8route.per_token_group_quant(x, group_size, dtype, rounding, storage, layout,
                                                                   True))
    return _group_quant(x, group_size, dtype, rounding, storage, layout, out, True)


def _masked_group_quant(x, masked_m, group_size, dtype, rounding, storage, layout, out, fused):
    hidden = _group_hidden(x, group_size, fused)
    q, s = _group_outputs(x, x.shape[1], hidden, x.shape[0], group_size, dtype, rounding, storage, layout, out,
                          batched=True)
    lib.masked_per_token_group_quant(x, masked_m, _bits(q), s, group_size, dtype, rounding, storage, layout, fused)
    return q, s


def masked_per_token_group_quant(x, masked_m, group_size=128, dtype="e4m3", rounding="none", storage="f32",
                                 layout="row_major", out=None, fused=False):
    """x [E, T_pad, H] (fused: [E, T_pad, 2H]), masked_m int32 [E]: rows t >= masked_m[e] are neither
    read nor written. Returns (q [E, T_pad, H], s)."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 3:
        _check_ndim(x, 3, "x", "[E, T_pad, H]")
    if _compiling():
        return _into(out, torch.ops.fp8route.masked_per_token_group_quant(x, masked_m, group_size, dtype, rounding,
                                                                          storage, layout, bool(fused)))
    return _masked_group_quant(x, masked_m, group_size, dtype, rounding, storage, layout, out, fused)


def masked_silu_and_mul_per_token_group_quant(x, masked_m, **kwargs):
    """The masked form with the fused silu_and_mul: x [E, T_pad, 2H]."""
    return masked_per_token_group_quant(x, masked_m, fused=True, **kwargs)


def _scatter_group_quant(x, src2dst, rows, group_size, dtype, rounding, storage, layout, out, unique_rows=False):
    q, s = _group_outputs(x, rows, x.shape[1], 0, group_size, dtype, rounding, storage, layout, out, zero=True)
    lib.scatter_per_token_group_quant(x, src2dst, _bits(q), s, group_size, dtype, rounding, storage, layout,
                                      bool(unique_rows))
    return q, s


def scatter_per_token_group_quant(x, src2dst, rows, group_size=128, dtype="e4m3", rounding="none", storage="f32",
                                  layout="row_major", out=None, unique_rows=False):
    """x [T, H], src2dst int32 [T, topk] (-1 = skip): each token quantized once and written to its
    destination rows of q [rows, H] and s (layout of rows x H). Allocated outputs start zeroed
    (rows no token maps to are not written). unique_rows=True: the caller promises no row is named
    twice (a dispatch's src2dst), which skips finding each row's writer (a reset and a pass over
    src2dst); a row named twice then gets unspecified codes and scales."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        if out is not None:  # rows no token maps to keep what out held
            raise ValueError("out: not taken by scatter_per_token_group_quant under torch.compile (the op "
                             "returns new, zeroed tensors)")
        return torch.ops.fp8route.scatter_per_token_group_quant(x, src2dst, rows, group_size, dtype, rounding,
                                                                storage, layout, bool(unique_rows))
    return _scatter_group_quant(x, src2dst, rows, group_size, dtype, rounding, storage, layout, out, unique_rows)


def _scatter_token_quant(x, src2dst, rows, dtype, rounding, out, unique_rows=False):
    if out is None:
        if not isinstance(x, _Tensor):
            raise ValueError(_NOT_TORCH)
        device = x.device
        q = torch.empty(size=(rows, x.shape[1]), dtype=_TORCH_DTYPES[_CODE_DTYPES[dtype]], device=device)
        s = torch.empty(size=(rows,), dtype=_F32, device=device)
    else:
        q, s = out
    lib.scatter_per_token_quant(x, src2dst, _bits(q), s, rounding, bool(unique_rows))
    return q, s


def scatter_per_token_quant(x, src2dst, rows, dtype="e4m3", rounding="none", out=None, unique_rows=False):
    """x [T, H], src2dst int32 [T, topk] (-1 = skip): each token quantized once, with the codes and
    scale per_token_quant gives it, and written to its destination rows of q [rows, H] and s f32
    [rows]. Rows no entry maps to are not written: allocated outputs are torch.empty there (unlike
    scatter_per_token_group_quant's zeros; in Fp8MoE's masked form those rows lie past masked_m and
    reach no output). unique_rows=True: as scatter_per_token_group_quant's (no search for each row's
    writer)."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        return _into(out, torch.ops.fp8route.scatter_per_token_quant(x, src2dst, rows, dtype, rounding,
                                                                     bool(unique_rows)))
    return _scatter_token_quant(x, src2dst, rows, dtype, rounding, out, unique_rows)


def _token_quant(x, dtype, rounding, out, fused):
    if out is None:
        shape = x.shape
        t, h = shape[0], shape[1] // 2 if fused else shape[1]
        code = _CODE_DTYPES[dtype]
        if not isinstance(x, _Tensor):
            raise ValueError(_NOT_TORCH)
        device = x.device
        q = torch.empty(size=(t, h), dtype=_TORCH_DTYPES[code], device=device)
        s = torch.empty(size=(t,), dtype=_F32, device=device)
    else:
        q, s = out
    lib.per_token_quant(x, _bits(q), s, rounding, fused)
    return q, s


def per_token_quant(x, dtype="e4m3", rounding="none", out=None):
    """x [T, H] -> (q [T, H], s f32 [T]): one scale per row."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        return _into(out, torch.ops.fp8route.per_token_quant(x, dtype, rounding, False))
    return _token_quant(x, dtype, rounding, out, False)


def silu_and_mul_per_token_quant(x, dtype="e4m3", rounding="none", out=None):
    """x [T, 2H] -> act = silu(x[:, :H]) * x[:, H:] in fp32 -> (q [T, H], s f32 [T]), one scale per row
    (the input of a down projection with per-token scales, in one kernel)."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, 2H]")
    if _compiling():
        return _into(out, torch.ops.fp8route.per_token_quant(x, dtype, rounding, True))
    return _token_quant(x, dtype, rounding, out, True)


def _masked_token_quant(x, masked_m, dtype, rounding, out):
    if out is None:
        if not isinstance(x, _Tensor):
            raise ValueError(_NOT_TORCH)
        e, t, h = x.shape[0], x.shape[1], x.shape[2] // 2
        q = torch.empty(size=(e, t, h), dtype=_TORCH_DTYPES[_CODE_DTYPES[dtype]], device=x.device)
        s = torch.empty(size=(e, t), dtype=_F32, device=x.device)
    else:
        q, s = out
    lib.masked_silu_and_mul_per_token_quant(x, masked_m, _bits(q), s, rounding)
    return q, s


def masked_silu_and_mul_per_token_quant(x, masked_m, dtype="e4m3", rounding="none", out=None):
    """x [E, M_max, 2H], masked_m int32 [E] -> (q [E, M_max, H], s f32 [E, M_max]): the masked form of
    silu_and_mul_per_token_quant (each valid row's codes and scale exactly as it gives them). Rows
    t >= masked_m[e] (counts clamped to [0, M_max]) are neither read nor written: allocated outputs
    are torch.empty there (in Fp8MoE's masked form those rows reach no output)."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 3:
        _check_ndim(x, 3, "x", "[E, M_max, 2H]")
    if _compiling():
        return _into(out, torch.ops.fp8route.masked_silu_and_mul_per_token_quant(x, masked_m, dtype, rounding))
    return _masked_token_quant(x, masked_m, dtype, rounding, out)


def _tensor_quant(x, scale, dtype, out):
    q = out if out is not None else _empty(x, x.shape, _CODE_DTYPES[dtype])
    dynamic = scale is None
    if dynamic:
        scale = _empty(x, (1,), "f32")
    lib.per_tensor_quant(x, _bits(q), scale, dynamic)
    return q, scale


def per_tensor_quant(x, scale=None, dtype="e4m3", out=None):
    """Static (scale given, f32 [1] on the device): q = encode(x / scale). Dynamic (scale=None): one
    pass for the amax, then the codes; returns (q, scale f32 [1])."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if _compiling():
        if scale is None:
            q, scale = torch.ops.fp8route.per_tensor_quant(x, dtype)
            return _into(out, q), scale
        return _into(out, torch.ops.fp8route.per_tensor_quant_static(x, scale, dtype)), scale
    return _tensor_quant(x, scale, dtype, out)


def _norm_call(x, weight, eps, residual, residual_out, q, s, quant, group_size=128, dtype="e4m3", rounding="none",
               storage="f32", layout="row_major", static_weight=False):
    if residual is not None and residual_out is None:
        residual_out = _empty(x, x.shape, _name_of(x))
    has = residual is not None
    lib.rms_norm(x, weight, float(eps), has, residual if has else x, residual_out if has else x, _bits(q), s, quant,
                 group_size, dtype, rounding, storage, layout, bool(static_weight))
    return residual_out


_NAME_OF = {torch.bfloat16: "bf16", torch.float16: "f16"} if torch is not None else {}


def _name_of(x):
    return _NAME_OF.get(x.dtype, "bf16") if isinstance(x, _Tensor) else "bf16"


def _norm_result(r, out, residual_out, residual):
    """A traced norm op's results (..., h) as the eager function returns them (h only with a
    residual), copied into out and residual_out where given."""
    *first, h = r
    if out is not None:
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        for o, v in zip(outs, first):
            o.copy_(v)
        first = outs
    if residual is None:
        return tuple(first) if len(first) > 1 else first[0]
    if residual_out is not None:
        h = residual_out.copy_(h)
    return (*first, h)


def _rms_norm(x, weight, eps, residual, out, residual_out, static_weight=False):
    y = out if out is not None else _empty(x, x.shape, _name_of(x))
    return y, _norm_call(x, weight, eps, residual, residual_out, y, x, "none", static_weight=static_weight)


def rms_norm(x, weight, eps=1e-6, residual=None, out=None, residual_out=None, static_weight=False):
    """y = rms_norm(h) * weight with h = x, or h = x + residual (rounded to x's dtype) when residual
    is given: x, residual [T, H] bf16/f16, weight [H]. Returns y, or (y, h) with a residual.
    out=x and residual_out=residual are allowed (in place, as engines' fused_add_rms_norm).
    static_weight=True (every rms_norm op): the caller promises that no kernel still running on the
    stream writes weight (a model's norm weight, written at load time), so the kernel loads it while
    the previous kernel finishes (include/fp8route/norm.h); the result is the same."""
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        return _norm_result(torch.ops.fp8route.rms_norm(x, weight, eps, residual, static_weight), out, residual_out,
                            residual)
    y, h = _rms_norm(x, weight, eps, residual, out, residual_out, static_weight)
    return y if residual is None else (y, h)


def _rms_norm_group_quant(x, weight, eps, residual, residual_out, group_size, dtype, rounding, storage, layout, out,
                         static_weight=False):
    q, s = _group_outputs(x, x.shape[0], x.shape[1], 0, group_size, dtype, rounding, storage, layout, out)
    h = _norm_call(x, weight, eps, residual, residual_out, q, s, "group", group_size, dtype, rounding, storage, layout,
                   static_weight)
    return q, s, h


def rms_norm_per_token_group_quant(x, weight, eps=1e-6, residual=None, residual_out=None, group_size=128,
                                   dtype="e4m3", rounding="none", storage="f32", layout="row_major", out=None,
                                   static_weight=False):
    """rms_norm (as rms_norm()) fused with per_token_group_quant of its output: (q, s), or (q, s, h)
    with a residual. Codes and scales equal rms_norm() then per_token_group_quant(), bit for bit."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        r = torch.ops.fp8route.rms_norm_per_token_group_quant(x, weight, eps, residual, group_size, dtype, rounding,
                                                              storage, layout, static_weight)
        return _norm_result(r, out, residual_out, residual)
    q, s, h = _rms_norm_group_quant(x, weight, eps, residual, residual_out, group_size, dtype, rounding, storage,
                                    layout, out, static_weight)
    return (q, s) if residual is None else (q, s, h)


def _rms_norm_token_quant(x, weight, eps, residual, residual_out, dtype, rounding, out, static_weight=False):
    q, s = out if out is not None else (_empty(x, x.shape, _CODE_DTYPES[dtype]), _empty(x, (x.shape[0],), "f32"))
    h = _norm_call(x, weight, eps, residual, residual_out, q, s, "token", dtype=dtype, rounding=rounding,
                   static_weight=static_weight)
    return q, s, h


def rms_norm_per_token_quant(x, weight, eps=1e-6, residual=None, residual_out=None, dtype="e4m3", rounding="none",
                             out=None, static_weight=False):
    """rms_norm fused with per_token_quant: (q [T, H], s f32 [T]), or (q, s, h) with a residual."""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        r = torch.ops.fp8route.rms_norm_per_token_quant(x, weight, eps, residual, dtype, rounding, static_weight)
        return _norm_result(r, out, residual_out, residual)
    q, s, h = _rms_norm_token_quant(x, weight, eps, residual, residual_out, dtype, rounding, out, static_weight)
    return (q, s) if residual is None else (q, s, h)


def _rms_norm_tensor_quant(x, weight, scale, eps, residual, residual_out, dtype, out, static_weight=False):
    q = out if out is not None else _empty(x, x.shape, _CODE_DTYPES[dtype])
    return q, _norm_call(x, weight, eps, residual, residual_out, q, scale, "tensor_static", dtype=dtype,
                         static_weight=static_weight)


def rms_norm_per_tensor_quant(x, weight, scale, eps=1e-6, residual=None, residual_out=None, dtype="e4m3", out=None,
                              static_weight=False):
    """rms_norm fused with per-tensor quant by a static scale (f32 [1] on the device): q, or (q, h)
    with a residual. (A dynamic scale needs the whole tensor first: rms_norm() then per_tensor_quant().)"""
    if dtype != "e4m3":
        dtype = _code(dtype)
    if type(x) is not _Tensor or x.dim() != 2:
        _check_ndim(x, 2, "x", "[T, H]")
    if _compiling():
        r = torch.ops.fp8route.rms_norm_per_tensor_quant(x, weight, scale, eps, residual, dtype, static_weight)
        return _norm_result(r, out, residual_out, residual)
    q, h = _rms_norm_tensor_quant(x, weight, scale, eps, residual, residual_out, dtype, out, static_weight)
    return q if residual is None else (q, h)


def _decode_attention(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads, scale, window, q_norm,
                      k_norm, eps, out, cache_ready=False):
    if out is None:
        d = qkv.shape[1] // (num_q_heads + 2 * num_kv_heads) if num_q_heads + 2 * num_kv_heads > 0 else 0
        out = _empty(qkv, (qkv.shape[0], num_q_heads * d), _name_of(qkv))
    has = q_norm is not None
    lib.decode_attention(qkv, k_cache, v_cache, cos, sin, positions, has, q_norm if has else qkv,
                         k_norm if has else qkv, float(eps), int(num_q_heads), int(num_kv_heads),
                         0.0 if scale is None else float(scale), int(window), bool(cache_ready), out)
    return out


def decode_attention(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads, scale=None, window=0,
                     q_norm=None, k_norm=None, eps=1e-6, out=None, cache_ready=False):
    """Attention of one new token per sequence over its KV cache, fused with what precedes it:
    qkv [B, (Hq + 2 Hk) * D] (bf16/f16; the q heads, then k, then v) -> optional per-head RMSNorm of
    q and k (q_norm, k_norm [D]), rotary embedding by row `position` of cos/sin [>= S, D]
    (rotate-half), k and v written to k_cache / v_cache [B, Hk, S, D] at each sequence's position,
    then softmax(q k^T * scale) v over positions max(0, p - window + 1) .. p (window 0: all).
    positions: int32 [B] on the device (int64 is converted: one small copy per call). scale: default
    1 / sqrt(D). Returns out [B, Hq * D]. A position outside [0, S) writes nothing and gives NaN.
    cache_ready=True promises that positions and the cached rows before each position are not
    written by the kernel just before this call on the stream (the qkv projection, in a decoder
    whose cache only this op and earlier steps write): the kernel then loads them while that kernel
    finishes (programmatic dependent launch)."""
    if _is_torch(positions) and positions.dtype == torch.int64:
        positions = positions.to(torch.int32)
    if type(qkv) is not _Tensor or qkv.dim() != 2:
        _check_ndim(qkv, 2, "qkv", "[B, (Hq + 2 Hk) * D]")
    if (q_norm is None) != (k_norm is None):
        raise ValueError("q_norm, k_norm: give both or neither")
    if _compiling():
        return _into(out, torch.ops.fp8route.decode_attention(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads,
                                                              num_kv_heads, 0.0 if scale is None else float(scale),
                                                              window, q_norm, k_norm, eps, bool(cache_ready)))
    return _decode_attention(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads, scale, window,
                             q_norm, k_norm, eps, out, cache_ready)


def _b_cols(a, b):
    """N of a scaled_mm: b is [N, K] with unit last stride, or its [K, N] transpose view with unit
    first stride (where both fit, K == N, the strides decide), as check_scaled_mm reads it (gemm.h).
    A b that is neither gets its first dim here and the C++ error naming b."""
    b_shape = b.shape
    if not isinstance(b, _Tensor) or len(b_shape) != 2 or len(a.shape) != 2:
        return b_shape[0] if len(b_shape) else 0
    k = a.shape[1]
    if b_shape[1] == k and (b.stride(1) == 1 or k <= 1):
        return b_shape[0]
    if b_shape[0] == k and (b.stride(0) == 1 or k <= 1):
        return b_shape[1]
    return b_shape[0]


def _is_dtype(x):
    return isinstance(x, str) or (torch is not None and isinstance(x, torch.dtype))


_ACCUMS = ("fast", "precise")


def _accum(accum, use_fast_accum):
    """The accumulation class of a call: accum "fast" or "precise", or torch._scaled_mm's spelling
    use_fast_accum (True: fast, False: precise); both None: "fast". Both given must agree."""
    if accum is not None and accum not in _ACCUMS:
        raise ValueError(f"accum: \"fast\" or \"precise\", got {accum!r}")
    if use_fast_accum is not None:
        if not isinstance(use_fast_accum, bool):
            raise ValueError(f"use_fast_accum: True or False, got {use_fast_accum!r}")
        implied = "fast" if use_fast_accum else "precise"
        if accum is not None and accum != implied:
            raise ValueError(f"accum, use_fast_accum: accum={accum!r} and use_fast_accum={use_fast_accum} disagree "
                             f"(use_fast_accum={use_fast_accum} means accum={implied!r}); give one")
        return implied
    return accum or "fast"


def scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=None, scale=None, out=None, accum=None,
              use_fast_accum=None):
    """y[M, N] = (a @ b^T) * scale_a * scale_b (+ bias): a e4m3 [M, K]; b e4m3 [N, K] (the nn.Linear
    weight layout) or its [K, N] transpose view (weight.t(), what torch._scaled_mm takes). Arguments
    in torch._scaled_mm's order; out_dtype "bf16", "f16", torch.bfloat16 or torch.float16 (None:
    bf16). scale: "tensor" (one element each), "row" (scale_a [M] or [M, 1], scale_b [N], [N, 1] or
    [1, N]; either may be one element), "block" (scale_a [ceil(K/128), align(M, 4)] or an
    [M, ceil(K/128)] view, scale_b [ceil(N/128), ceil(K/128)] or its transpose view); None infers it
    from the shapes (infer_scale_kind in gemm.h). vLLM's and SGLang's positional order (a, b, scale_a,
    scale_b, out_dtype, bias) is accepted too: a dtype in bias's place is read as out_dtype. Routed to the backend measured
    fastest (explain() says which). accum: "fast" (None, the default: every backend config may run
    it) or "precise" (only configs that sum each 128 of K in fp32: torch._scaled_mm's default
    arithmetic); use_fast_accum=True/False is torch._scaled_mm's spelling of the same choice."""
    if bias is not None and type(bias) is not _Tensor and _is_dtype(bias):
        if _is_dtype(out_dtype):
            raise ValueError(f"bias: a tensor or None, got {bias!r} (and out_dtype={out_dtype!r})")
        bias, out_dtype = out_dtype, bias
    try:
        name = _OUT_FAST.get(out_dtype) or _out_name(out_dtype)
    except TypeError:  # unhashable: _out_name names it
        name = _out_name(out_dtype)
    kind = "auto" if scale is None else scale
    acc = "fast" if accum is None and use_fast_accum is None else _accum(accum, use_fast_accum)
    if _compiling():
        return _into(out, torch.ops.fp8route.scaled_mm(a, b, scale_a, scale_b, bias, _TORCH_OUT[name], kind, acc))
    return _scaled_mm(a, b, scale_a, scale_b, bias, name, kind, out, acc)


def _scaled_mm(a, b, scale_a, scale_b, bias, name, kind, out, accum="fast"):
    if out is None:
        m, n = a.shape[0], _b_cols(a, b)
        if not isinstance(a, _Tensor):
            raise ValueError(_NOT_TORCH)
        out = torch.empty(size=(m, n), dtype=_TORCH_DTYPES[name], device=a.device)
    if bias is None:
        lib.scaled_mm(_bits(a), _bits(b), scale_a, scale_b, out, kind, accum)
    else:
        lib.scaled_mm_bias(_bits(a), _bits(b), scale_a, scale_b, bias, out, kind, accum)
    return out


def explain(m, n, k, scale="row", out_dtype="bf16", accum=None, use_fast_accum=None):
    """Which backend/config scaled_mm runs for this problem, where the choice came from (exact table
    entry, nearest entries, heuristic), the ranked measured candidates and why any was skipped; with
    accum="precise" (or use_fast_accum=False), among the precise-class configs only."""
    return str(lib.explain(m, n, k, scale, _out_name(out_dtype), _accum(accum, use_fast_accum)))


_loaded_table = None  # the path load_table() last loaded, if any


def load_table(path):
    """Route by this routing table from now on (ValueError naming the file if it does not load)."""
    global _loaded_table
    lib.load_table(str(path))
    _loaded_table = str(path)


def save_table(path, timings=()):
    """Writes the routing table in use, with `timings` (what Fp8Linear.probe returned) merged in, to
    path. load_table(path) (or FP8ROUTE_TABLE=path) in a later process routes the probed shapes by
    those timings, with no probe needed. ValueError names a bad timing or an unwritable path."""
    lib.save_table(str(path), list(timings))


def _m_grid(m_grid):
    """A probe's m_grid as a list of ints (None: the default grid)."""
    if m_grid is None:
        return None
    try:
        return [int(m) for m in m_grid]
    except (TypeError, ValueError):
        raise ValueError(f"m_grid: integers expected, got {m_grid!r}") from None


def _shapes_and_scales(shapes, scales):
    """probe's and warmup's (N, K) pairs as lists of ints, and scale kinds as a list of names."""
    pairs = []
    for shape in shapes:
        try:
            n, k = (int(v) for v in shape)
        except (TypeError, ValueError):
            raise ValueError(f"shapes: (N, K) pairs expected, got {shape!r}") from None
        pairs.append([n, k])
    if isinstance(scales, str):
        scales = [scales]
    return pairs, [str(s) for s in scales]


def probe(shapes, scales=("tensor", "row", "block"), out_dtype="bf16", m_grid=None, top=5, always=False):
    """Times the routing candidates of each (N, K) of `shapes` on this GPU, for every scale kind of
    `scales`, and routes scaled_mm() by those times from then on (the process-wide router; the
    load-time probe of Fp8Linear.probe, for callers of scaled_mm). At the M of m_grid (default
    1..4096, the catalog's grid) where the table has no exact entry for the shape, or at every M with
    always=True; per M the table's `top` best guesses, every cuBLASLt and skinny config and the
    heuristic's choice. Load-time work: call it before serving and before capturing graphs. An
    Fp8Linear made before the call keeps the routes it was made with (use its own probe()). Returns
    the timings (a list of dicts: m, n, k, scale, out, backend, config, us), empty when no M needed
    one; save_table(path) keeps the table with them for the next process. Needs a GPU (RuntimeError
    otherwise, unless nothing needs timing); ValueError names a bad argument."""
    pairs, scales = _shapes_and_scales(shapes, scales)
    grid = _m_grid(m_grid)
    return plain(lib.probe_shapes(pairs, scales, _out_name(out_dtype), grid, int(top), bool(always)))


def set_autoprobe(enabled, cache_dir=None, budget_s=None, call_budget_s=None):
    """Turns automatic probing on or off for this process (the environment's FP8ROUTE_AUTOPROBE=0
    does so for every process): an Fp8Linear made afterwards, and scaled_mm at its next eager call,
    time a shape the routing table lacks on this GPU and keep the timings in the probe cache
    (cache_dir: a folder instead of FP8ROUTE_CACHE_DIR / ~/.cache/fp8route; "" keeps them in this
    process only), within budget_s seconds of probing per process. A scaled_mm call probes for at
    most call_budget_s seconds (default 2; 0: no bound), the grid's M nearest its own first; later
    calls near M still due probe them, and warmup() probes the rest ahead. Turning it on makes
    scaled_mm decide its shapes again."""
    def seconds(name, v):
        if v is None:
            return -1.0  # keep the current value
        v = float(v)
        if not v >= 0:  # NaN too
            raise ValueError(f"{name}: seconds >= 0 expected, got {v}")
        return v

    lib.set_autoprobe(bool(enabled), None if cache_dir is None else str(cache_dir),
                      seconds("budget_s", budget_s), seconds("call_budget_s", call_budget_s))


def warmup(shapes, scales=("tensor", "row", "block"), out_dtype="bf16", bias=False):
    """Warms scaled_mm up ahead of serving: for each (N, K) of `shapes` and each scale kind of
    `scales` that the routing table lacks, probes now every M of the probe grid that a first call
    would otherwise time (nothing when the table or the probe cache has the shape), so that no call
    blocks to probe later. Call it at model load, before capturing CUDA graphs. Returns what it did:
    the records autoprobe_info() lists, one per shape probed or read from the cache. Needs automatic
    probing on (the default) and a GPU (without one it does nothing); ValueError names a bad
    argument."""
    pairs, scales = _shapes_and_scales(shapes, scales)
    return plain(lib.warmup(pairs, scales, _out_name(out_dtype), bool(bias)))


def autoprobe_info():
    """Automatic probing in this process: {"enabled", "cache_dir", "budget_s", "call_budget_s",
    "m_grid", "records"}, records being what it did, in order: {"scale", "out", "n", "k", "caller"
    (Fp8Linear's "LinearPlan", "scaled_mm" or "warmup"), "outcome" (probed, cached, skipped,
    failed), "seconds" (probing time), "m" (the M it timed), "timings", "file" (the cache file),
    "note" (why, when skipped or failed)}. A shape a bounded scaled_mm call probed in part has one
    record per part."""
    return plain(lib.autoprobe_info())


def table_info():
    """The routing table in use: {"path", "entries", "stamp", "load_error"}."""
    info = plain(lib.table_info())
    info["path"] = _loaded_table or info.pop("default_path")
    info.pop("default_path", None)
    return info

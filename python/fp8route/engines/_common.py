"""What the engine drop-ins share: reading the engines' argument spellings (booleans, torch dtypes,
eps) into fp8route's options, and returning scales in the engines' shapes and views.

Scale layouts, fp8route's physical buffer -> what vLLM and SGLang return:
  row-major             [T, G]                    -> the same tensor
  column-major          [G, T]                    -> its transpose view [T, G], strides (1, T)
  column-major TMA      [G, align(T, 4)]          -> [T, G] view, strides (1, align(T, 4))
  UE8M0 packed (TMA)    [ceil(G/4), align(T, 4)]  -> [T, ceil(G/4)] int32 view, strides (1, align(T, 4))
The transpose views are what the engines' GEMMs (and fp8route.scaled_mm) read in place.
"""
from .. import ops

torch = ops.torch

# torch.float8_e4m3fn where torch is installed: the engines' default for their dtype arguments.
FP8 = torch.float8_e4m3fn if torch is not None else "float8_e4m3fn"

# The floor of each group's amax in every fp8route quant kernel (kAmaxFloor, docs/numerics.md),
# which is also the engines' default eps.
EPS = 1e-10

_CODE_NAMES = {"fp8": "e4m3", "e4m3": "e4m3", "float8_e4m3fn": "e4m3", "torch.float8_e4m3fn": "e4m3",
               "i8": "i8", "int8": "i8", "torch.int8": "i8"}
if torch is not None:
    _CODE_NAMES.update({torch.float8_e4m3fn: "e4m3", torch.int8: "i8"})


def code(dtype, name="dtype", int8=False):
    """fp8route's code name ("e4m3" or "i8") of an engine's dtype argument: None (E4M3),
    torch.float8_e4m3fn, "fp8", "float8_e4m3fn" or "e4m3"; torch.int8, "int8" or "i8" where the
    function quantizes to INT8 too. Anything else is a ValueError naming the argument."""
    if dtype is None:
        return "e4m3"
    try:
        c = _CODE_NAMES.get(dtype)
    except TypeError:  # unhashable
        c = None
    if c == "e4m3" or (c == "i8" and int8):
        return c
    accepted = "torch.float8_e4m3fn, \"fp8\" or \"float8_e4m3fn\"" + (", torch.int8 or \"int8\"" if int8 else "")
    raise ValueError(f"{name}: {accepted} (fp8route's FP8 is E4M3, OCP FN); got {dtype!r}")


def flag(value, name):
    """An engine's boolean option: True or False (numpy's bool too); anything else, strings
    included, is a ValueError naming the argument."""
    if value is True or value is False:
        return value
    if type(value).__name__ == "bool_":  # numpy.bool_
        return bool(value)
    raise ValueError(f"{name}: True or False, got {value!r}")


def check_eps(eps):
    try:
        ok = float(eps) == EPS
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"eps: fp8route's kernels floor each group's amax at {EPS:g} (docs/numerics.md); "
                         f"another floor is not supported, got {eps!r}")


def check_group_size(group_size):
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ValueError(f"group_size: an int (16, 32, 64, 128 or 256), got {group_size!r}")


def need_torch(name):
    if torch is None:
        raise ValueError(f"{name}: the engine drop-ins allocate their outputs with torch, which is not installed")


def group_quant(x, group_size, code_name, column_major, tma_aligned, scale_mode, fused=False, masked_m=None,
                out_q=None):
    """Per-token-group quantization in the engines' conventions. scale_mode: "f32" (amax / qmax),
    "pow2" (rounded up to a power of two, stored as f32: vLLM's use_ue8m0) or "packed" (UE8M0 bytes,
    four per int32: SGLang's scale_ue8m0, column-major TMA-aligned only). Returns (q, s) with q of
    x's shape (last dim halved when fused) and s as the engines return it (module docstring)."""
    need_torch("x")
    rounding, storage = ("none", "f32") if scale_mode == "f32" else ("pow2", "f32")
    if scale_mode == "packed":
        if not (column_major and tma_aligned):
            raise ValueError("scale_ue8m0: packed UE8M0 scales are column-major and TMA-aligned: pass "
                             "column_major_scales=True and scale_tma_aligned=True with it")
        storage = "ue8m0_packed"
    layout = "row_major" if not column_major else ("col_major_tma" if tma_aligned else "col_major")
    kw = dict(group_size=group_size, dtype=code_name, rounding=rounding, storage=storage, layout=layout)

    if masked_m is not None:
        if x.dim() != 3:
            raise ValueError(f"x: with masked_m, [E, T_pad, H] (fused: [E, T_pad, 2H]), got shape {tuple(x.shape)}")
        if out_q is not None:
            raise ValueError("out_q: not taken with masked_m")
        q, s = ops.masked_per_token_group_quant(x, masked_m, fused=fused, **kw)
        return q, (s if layout == "row_major" else s.transpose(-1, -2)[:, :x.shape[1], :])

    if x.dim() < 2:
        raise ValueError(f"x: [..., H] with at least 2 dims, got shape {tuple(x.shape)}")
    lead = tuple(x.shape[:-1])
    if x.dim() != 2:
        if column_major:
            raise ValueError(f"x: column-major scales take x [T, H] (or [E, T, H] with masked_m), got shape "
                             f"{tuple(x.shape)}")
        x = x.reshape(-1, x.shape[-1])
    tokens = x.shape[0]
    hidden = x.shape[1] // 2 if fused else x.shape[1]
    out = None
    if out_q is not None:
        if tuple(out_q.shape) != lead + (hidden,):
            raise ValueError(f"out_q: shape {lead + (hidden,)} expected (x's, with the last dim {hidden}), got "
                             f"{tuple(out_q.shape)}")
        lay = ops.quant_layout(tokens, hidden, **kw)
        s = torch.empty(size=tuple(lay["s"]), dtype=torch.int32 if lay["s_dtype"] == "i32" else torch.float32,
                        device=x.device)
        out = (out_q.view(tokens, hidden), s)
    fn = ops.silu_and_mul_per_token_group_quant if fused else ops.per_token_group_quant
    q, s = fn(x, out=out, **kw)
    if layout != "row_major":
        s = s.t()[:tokens]
    elif len(lead) != 1:
        q, s = q.view(*lead, hidden), s.view(*lead, s.shape[-1])
    return (out_q if out_q is not None else q), s


def scaled_fp8_quant(input, scale, num_token_padding, scale_ub, use_per_token_if_dynamic, output):
    """vLLM's and SGLang's scaled_fp8_quant: (codes, scale). Static (scale given, one element): per
    tensor by that scale, which is returned as given. Dynamic: per token (scale f32 [rows, 1]) with
    use_per_token_if_dynamic, else per tensor (scale f32 [1]). num_token_padding: the outputs have
    max(num_token_padding, T) rows; the padding rows are not written, as in the engines."""
    per_token = flag(use_per_token_if_dynamic, "use_per_token_if_dynamic")
    if scale_ub is not None:
        raise ValueError("scale_ub: not supported (fp8route's per-token scale has no upper bound); pass None")
    need_torch("input")
    if input.dim() != 2:
        raise ValueError(f"input: [T, H] expected, got shape {tuple(input.shape)}")
    tokens, hidden = input.shape
    rows = tokens
    if num_token_padding is not None:
        if isinstance(num_token_padding, bool) or not isinstance(num_token_padding, int) or num_token_padding < 0:
            raise ValueError(f"num_token_padding: an int >= 0 or None, got {num_token_padding!r}")
        rows = max(num_token_padding, tokens)
    if output is None:
        output = torch.empty(size=(rows, hidden), dtype=torch.float8_e4m3fn, device=input.device)
    elif tuple(output.shape) != (rows, hidden):
        raise ValueError(f"output: shape {(rows, hidden)} expected, got {tuple(output.shape)}")
    q = output[:tokens] if rows != tokens else output
    if scale is not None:
        if getattr(scale, "numel", lambda: 0)() != 1:
            shape = tuple(getattr(scale, "shape", ()))
            raise ValueError(f"scale: a static scale is one f32 element (per tensor), got shape {shape}")
        ops.per_tensor_quant(input, scale.reshape(1), out=q)
        return output, scale
    if per_token:
        s = torch.empty(size=(rows, 1), dtype=torch.float32, device=input.device)
        ops.per_token_quant(input, out=(q, s[:tokens, 0]))
        return output, s
    _, s = ops.per_tensor_quant(input, out=q)
    return output, s

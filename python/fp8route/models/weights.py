"""A linear layer's weight as a checkpoint stores it (FP8 codes with per-tensor, per-channel or
128x128 block scales, or unquantized), and the exact conversions, cuts and concatenations that
tensor parallelism and the backends need."""
import torch

from ..weight_quant import BLOCK, _ceil, quantize_weight


def quantize(w, kind, bias=None, input_scale=None):
    """A float weight [N, K] as a LinearWeight of `kind`: "tensor", "channel", "block" (E4M3 codes,
    scale = amax / 448 per tensor, per row or per 128x128 block: weight_quant.quantize_weight) or
    "dense" (w as float32)."""
    if kind == "dense":
        return LinearWeight("dense", w.float(), None, bias, input_scale)
    if kind not in ("tensor", "channel", "block"):
        raise ValueError(f"kind: tensor, channel, block or dense, got {kind!r}")
    q, scale = quantize_weight(w, kind)
    return LinearWeight(kind, q, scale, bias, input_scale)


class LinearWeight:
    """A linear layer's weight [N, K] as stored.

    kind "tensor": w E4M3, scale f32 [1]; "channel": scale f32 [N]; "block": scale f32
    [ceil(N/128), ceil(K/128)] (w = codes * scale of the block); "dense": w float, no scale.
    input_scale: a checkpoint's static activation scale (f32 [1]) or None. bias: [N] or None.
    """
    __slots__ = ("kind", "w", "scale", "bias", "input_scale")

    def __init__(self, kind, w, scale=None, bias=None, input_scale=None):
        self.kind, self.w, self.scale, self.bias, self.input_scale = kind, w, scale, bias, input_scale

    @property
    def shape(self):
        return tuple(self.w.shape)

    def dequant(self):
        """float32 [N, K]."""
        f = self.w.float()
        if self.kind == "dense":
            return f
        if self.kind == "tensor":
            return f * self.scale.reshape(())
        if self.kind == "channel":
            return f * self.scale[:, None]
        n, k = f.shape
        s = self.scale.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
        return f * s

    def to(self, device):
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return LinearWeight(self.kind, mv(self.w), mv(self.scale), mv(self.bias), mv(self.input_scale))

    def convert(self, kind, dtype=torch.float32):
        """This weight as `kind`. Exact when kind is this kind, "dense" (dequantized, in dtype), or
        "channel" from "tensor" (the scale repeated per row); otherwise requantized from the
        dequantized values (a second rounding). "rowwise": "tensor" or "channel" kept, others to
        "channel" (what a per-token-activation GEMM takes)."""
        if kind == "dense":
            w = self.w.to(dtype) if self.kind == "dense" else self.dequant().to(dtype)
            return LinearWeight("dense", w, None, self.bias, self.input_scale)
        if kind == "rowwise":
            kind = self.kind if self.kind in ("tensor", "channel") else "channel"
        if kind == self.kind:
            return self
        if kind == "channel" and self.kind == "tensor":
            return LinearWeight("channel", self.w, self.scale.reshape(1).expand(self.w.shape[0]).contiguous(),
                                self.bias, self.input_scale)
        return quantize(self.dequant(), kind, self.bias, self.input_scale)

    def rows(self, a, b):
        """Output rows [a, b). Exact except for a block weight cut inside a block (a % 128 != 0),
        which is requantized into the slice's own blocks."""
        if a == 0 and b == self.w.shape[0]:
            return self
        bias = None if self.bias is None else self.bias[a:b]
        w = self.w[a:b]
        if self.kind in ("dense", "tensor"):
            return LinearWeight(self.kind, w, self.scale, bias, self.input_scale)
        if self.kind == "channel":
            return LinearWeight("channel", w, self.scale[a:b], bias, self.input_scale)
        if a % BLOCK == 0:  # a block's scale stays right for any subset of its rows
            return LinearWeight("block", w, self.scale[a // BLOCK:_ceil(b, BLOCK)].contiguous(), bias,
                                self.input_scale)
        return quantize(self.dequant()[a:b], "block", bias, self.input_scale)

    def cols(self, a, b):
        """Input columns [a, b) (the bias is kept whole: the caller decides which rank adds it)."""
        if a == 0 and b == self.w.shape[1]:
            return self
        w = self.w[:, a:b].contiguous()
        if self.kind != "block":
            return LinearWeight(self.kind, w, self.scale, self.bias, self.input_scale)
        if a % BLOCK == 0:
            return LinearWeight("block", w, self.scale[:, a // BLOCK:_ceil(b, BLOCK)].contiguous(), self.bias,
                                self.input_scale)
        return quantize(self.dequant()[:, a:b], "block", self.bias, self.input_scale)

    @staticmethod
    def cat_rows(parts):
        """Fuses layers that read the same input (q, k, v; gate, up) by concatenating along N.
        Per-tensor parts with one scale stay per tensor; per-tensor parts with different scales
        become one per-channel weight (each part's scale repeated over its rows: exact, no
        requantization); block parts concatenate exactly when every part but the last fills
        whole blocks, else the concatenation is requantized into blocks. Static input scales: the
        largest (no part's activations clip)."""
        biases = [p.bias for p in parts]
        bias = None
        if any(b is not None for b in biases):
            ref = next(b for b in biases if b is not None)
            bias = torch.cat([b if b is not None else ref.new_zeros(p.w.shape[0]) for b, p in zip(biases, parts)])
        ins = [p.input_scale for p in parts]
        input_scale = None
        if all(s is not None for s in ins):
            input_scale = torch.stack([s.reshape(()) for s in ins]).amax().reshape(1)
        kinds = {p.kind for p in parts}
        cat_w = lambda: torch.cat([p.w for p in parts])  # noqa: E731
        if kinds == {"dense"}:
            return LinearWeight("dense", cat_w(), None, bias, input_scale)
        if "dense" in kinds:  # unquantized beside quantized parts: all dequantized
            return LinearWeight("dense", torch.cat([p.dequant() for p in parts]), None, bias, input_scale)
        if kinds == {"tensor"} and all(torch.equal(p.scale, parts[0].scale) for p in parts):
            return LinearWeight("tensor", cat_w(), parts[0].scale, bias, input_scale)
        if kinds <= {"tensor", "channel"}:
            scale = torch.cat([p.convert("channel").scale for p in parts])
            return LinearWeight("channel", cat_w(), scale, bias, input_scale)
        if kinds == {"block"} and all(p.w.shape[0] % BLOCK == 0 for p in parts[:-1]):
            return LinearWeight("block", cat_w(), torch.cat([p.scale for p in parts]), bias, input_scale)
        dense = torch.cat([p.dequant() for p in parts])
        return quantize(dense, "block" if "block" in kinds else "channel", bias, input_scale)

    def nbytes(self):
        total = self.w.numel() * self.w.element_size()
        for t in (self.scale, self.bias):
            if t is not None:
                total += t.numel() * t.element_size()
        return total

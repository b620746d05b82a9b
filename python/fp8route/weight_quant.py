"""Weight quantization to FP8 E4M3 at load time: one helper for Fp8Linear.from_float and the models
package (and whatever layer next holds FP8 weights), so that a scale form is computed one way.

quantize_weight(w, scaling, method="torch") -> (codes float8_e4m3fn [N, K], scale f32):
  scaling "tensor": scale [1] = amax(|w|) / 448;
          "channel": scale [N], one per output row;
          "block": scale [ceil(N/128), ceil(K/128)], one per 128x128 block (the edge blocks read
                   the weight zero-padded to whole blocks);
  every scale floored at 1e-12 (an all-zero row or block gets codes 0, not NaN), codes = w / scale
  clamped to +-448. Computed in float32 with torch on w's device; any float dtype in.
  method "kernel" (scaling "channel" only): fp8route.per_token_quant on the GPU instead, the
  library's own per-row quantization (docs/numerics.md: amax floored at 1e-10, codes = w * (448 / amax)),
  so its codes can differ from "torch" in the last bit. Fp8Linear.from_float uses it for per-channel
  weights; the models package uses "torch".
"""
import torch

FP8_MAX = 448.0  # largest finite E4M3 value
BLOCK = 128      # the 128x128 weight blocks (and 1x128 activation groups) of block scaling
SCALINGS = ("tensor", "channel", "block")
_SCALE_FLOOR = 1e-12


def _ceil(a, b):
    return -(-a // b)


def quantize_weight(w, scaling, method="torch"):
    """(codes, scale) of a float weight [N, K]; the module docstring gives the rules."""
    if scaling not in SCALINGS:
        raise ValueError(f"scaling: one of {SCALINGS}, got {scaling!r}")
    if method == "kernel":
        if scaling != "channel":
            raise ValueError(f"method: 'kernel' quantizes per channel only, got scaling {scaling!r}")
        from . import ops  # the native library: loaded only for this method
        return ops.per_token_quant(w.detach().contiguous())
    if method != "torch":
        raise ValueError(f"method: 'torch' or 'kernel', got {method!r}")
    if w.dim() != 2:
        raise ValueError(f"w: [N, K] expected, got {tuple(w.shape)}")
    w = w.detach().float()
    n, k = w.shape
    if scaling == "tensor":
        scale = (w.abs().amax() / FP8_MAX).clamp(min=_SCALE_FLOOR).reshape(1)
        q = w / scale
    elif scaling == "channel":
        scale = (w.abs().amax(dim=1) / FP8_MAX).clamp(min=_SCALE_FLOOR)
        q = w / scale[:, None]
    else:
        nb, kb = _ceil(n, BLOCK), _ceil(k, BLOCK)
        padded = w.new_zeros(nb * BLOCK, kb * BLOCK)
        padded[:n, :k] = w
        blocks = padded.view(nb, BLOCK, kb, BLOCK)
        scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=_SCALE_FLOOR)
        q = (blocks / scale[:, None, :, None]).view(nb * BLOCK, kb * BLOCK)[:n, :k]
    # torch's float8 cast turns values past 464 into NaN: clamp first.
    q = q.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).contiguous()
    return q, scale.contiguous()

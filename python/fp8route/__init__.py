"""fp8route: FP8 quantization and measured-routing scaled GEMMs for NVIDIA Hopper.

Works with any DLPack tensor (torch, JAX, CuPy); with torch installed the ops are also registered
with torch.library (fake implementations for torch.compile) and Fp8Linear wraps a LinearPlan.
Errors are ValueError (a bad argument, a bad table file) or RuntimeError (CUDA, cuBLAS), with the
C++ message naming the argument and the rule.
"""
from ._native import LinearPlan
from ._native import lib as _lib
from .ops import (
    decode_attention,
    explain,
    load_table,
    save_table,
    probe,
    masked_per_token_group_quant,
    masked_silu_and_mul_per_token_group_quant,
    masked_silu_and_mul_per_token_quant,
    per_tensor_quant,
    per_token_group_quant,
    per_token_quant,
    quant_layout,
    rms_norm,
    rms_norm_per_tensor_quant,
    rms_norm_per_token_group_quant,
    rms_norm_per_token_quant,
    scaled_mm,
    scatter_per_token_group_quant,
    scatter_per_token_quant,
    silu_and_mul_per_token_group_quant,
    silu_and_mul_per_token_quant,
    table_info,
    set_autoprobe,
    autoprobe_info,
    warmup,
)
from .moe import (explain_grouped, grouped_scaled_mm, grouped_table_info, load_grouped_table, moe_combine,
                  moe_contiguous_dispatch, moe_grouped_topk, moe_masked_dispatch, moe_route_masked_dispatch,
                  moe_softmax_topk)

__version__ = str(_lib.version())

# An installed wheel carries the routing table measured on the H200; use it unless FP8ROUTE_TABLE
# names another or FP8ROUTE_DATA_DIR a folder to look in first (a source checkout's build finds
# routes/h200.json of the tree by itself).
def _use_packaged_table():
    import os
    packaged = os.path.join(os.path.dirname(os.path.abspath(__file__)), "routes", "h200.json")
    if not os.environ.get("FP8ROUTE_TABLE") and not os.environ.get("FP8ROUTE_DATA_DIR") and os.path.exists(packaged):
        load_table(packaged)


_use_packaged_table()

__all__ = [
    "explain", "load_table", "save_table", "probe", "table_info", "set_autoprobe", "autoprobe_info", "warmup", "quant_layout", "per_token_group_quant",
    "silu_and_mul_per_token_group_quant", "silu_and_mul_per_token_quant", "masked_per_token_group_quant",
    "masked_silu_and_mul_per_token_group_quant", "masked_silu_and_mul_per_token_quant",
    "scatter_per_token_group_quant", "scatter_per_token_quant",
    "per_token_quant",
    "per_tensor_quant", "rms_norm", "rms_norm_per_token_group_quant", "rms_norm_per_token_quant",
    "rms_norm_per_tensor_quant", "decode_attention", "scaled_mm", "grouped_scaled_mm", "moe_softmax_topk",
    "moe_grouped_topk", "moe_masked_dispatch", "moe_route_masked_dispatch", "moe_contiguous_dispatch",
    "moe_combine", "explain_grouped",
    "load_grouped_table", "grouped_table_info", "LinearPlan", "__version__",
]

try:  # torch is optional: the ops above work on any DLPack tensor given out= buffers.
    import torch as _torch  # noqa: F401
except ImportError:
    pass
else:
    from . import torch_ops  # noqa: F401  (registers fp8route:: ops with torch.library)
    from .linear import Fp8Linear  # noqa: F401
    from .moe import Fp8MoE  # noqa: F401
    __all__.append("Fp8Linear")
    __all__.append("Fp8MoE")

"""Drop-in replacements for the FP8 quantization and GEMM calls of vLLM and SGLang: the same names,
parameters (names, order, defaults) and return shapes as the engine functions they replace, backed
by fp8route's kernels, so that a call site changes its import and nothing else.

    from fp8route.engines import vllm as fp8_ops     # per_token_group_quant_fp8, scaled_fp8_quant, cutlass_scaled_mm
    from fp8route.engines import sglang as fp8_ops   # + sglang_per_token_group_quant_fp8, sglang_per_token_quant_fp8, fp8_scaled_mm

What each takes and where it differs from the engine: docs/python.md#engine-drop-ins. Needs torch
(the outputs are allocated with it).
"""
from . import sglang, vllm  # noqa: F401

__all__ = ["vllm", "sglang"]

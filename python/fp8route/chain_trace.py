"""The chain trace (include/fp8route/tuning/chain_trace.h): the decode-chain kernels stamp %globaltimer at each
block's start, griddepcontrol.wait release and exit, one slot per launch, first and last over the
blocks. A diagnostic for bench/decode_chain.py, not part of the package's API. The product kernels
are traced only in a build configured with -DFP8ROUTE_CHAIN_TRACE=ON (compiled_in()); the
calibration chain (empty_chain) works in every build.

    arm(4096)                  # slots from 0, in launch order
    ...capture a CUDA graph...  # each traced kernel node holds its slot
    disarm()
    reset(); graph.replay(); records = read()
"""
import json

from ._native import lib


def compiled_in():
    """True when the library was built with FP8ROUTE_CHAIN_TRACE."""
    return bool(json.loads(str(lib.chain_trace_info()))["compiled_in"])


def arm(capacity=4096):
    """Hands out slots 0 .. capacity - 1 to the next traced launches (outside any capture)."""
    lib.chain_trace_arm(int(capacity))


def disarm():
    lib.chain_trace_disarm()


def reset():
    """Zeroes the slots handed out since arm() (synchronizes the device)."""
    lib.chain_trace_reset()


def read():
    """[{kernel, grid, block, cluster, smem, start_first, start_last, release_first, release_last,
    exit_first, exit_last, blocks}] in launch order; times in ns of %globaltimer, 0 where no block
    recorded the event (synchronizes the device)."""
    return json.loads(str(lib.chain_trace_read()))


def tick_ns():
    """The smallest step of %globaltimer one thread observes, in ns."""
    return int(lib.chain_trace_tick_ns())


def empty_chain(buf, n, blocks=1, pdl=True):
    """n calibration kernels on the current stream (capturable): each triggers its dependents,
    waits, reads buf[i] and writes buf[i + 1] = buf[i] + 1; buf is int32 [n + 1] on the GPU."""
    lib.chain_trace_empty_chain(buf, int(n), int(blocks), bool(pdl))


def set_decode_deep_ring(enabled):
    """The decode GEMM's deep ring (include/fp8route/tuning/gemm_knobs.h) for launches made afterwards: with
    static weights, one-block-per-SM configs in one-wave grids request up to their whole K slice
    before griddepcontrol.wait. Off by default; bit-identical results either way."""
    lib.decode_deep_ring_set(bool(enabled))


def decode_deep_ring():
    return bool(lib.decode_deep_ring_get())


def set_grouped_decode_splits(splits):
    """The grouped decode backend's K splits per item for launches made afterwards
    (include/fp8route/tuning/gemm_knobs.h): 0 (the default) follows its rule; 1..8 asks for that many
    where they fit. For bench/moe_bench.py's comparison of split counts."""
    lib.grouped_decode_splits_set(int(splits))


def grouped_decode_splits():
    return int(lib.grouped_decode_splits_get())

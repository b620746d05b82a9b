#pragma once
// The heuristic (gemm_select(), fp8route/gemm.h) beside the router that falls back to it.

#include <string>

#include "fp8route/gemm.h"

namespace fp8route::heuristic {

// What explain() adds when a slow_fallback() backend runs p (heuristic.cpp, beside the fallback
// rule): that no fast backend supports p, the rules every fast backend shares that p breaks, and
// what the caller can change. One line, without its end.
std::string slow_fallback_note(const GemmProblem& p);

}  // namespace fp8route::heuristic

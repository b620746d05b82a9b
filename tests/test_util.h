#pragma once
// Helpers shared by the test suites: GPU skipping with a visible reason, seeded random inputs.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "fp8route/device.h"
#include "fp8route/error.h"

namespace fp8route::test {

// Skips the current test, printing why, when there is no SM90 GPU to run it on.
#define FP8ROUTE_REQUIRE_SM90()                                                        \
  do {                                                                                 \
    if (::fp8route::cuda_device_count() == 0)                                          \
      GTEST_SKIP() << "no GPU: " << ::fp8route::cuda_unavailable_reason();             \
    if (!::fp8route::device_info(0).is_sm90())                                         \
      GTEST_SKIP() << "needs an SM90 GPU; device 0 is " << ::fp8route::device_info(0).name; \
  } while (0)

// A fresh seed per run (FP8ROUTE_TEST_SEED=N to repeat one); printed so a failure can be replayed.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("FP8ROUTE_TEST_SEED");
    uint64_t v = s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
    std::printf("[fp8route] test seed %llu (repeat with FP8ROUTE_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(v), static_cast<unsigned long long>(v));
    return v;
  }();
  return seed;
}

// fn() throws Error(invalid_argument) whose message contains `word` (the argument it names).
template <class F>
void expect_invalid(F&& fn, const std::string& word) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one naming '" << word << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "'" << word << "' not in: " << e.what();
  }
}

// FP8ROUTE_TEST_QUICK=1 (any value but 0): the GPU tests that read it run a few representative
// problems instead of their whole lists, for runs under compute-sanitizer (scripts/sanitize.sh),
// whose instrumented kernels are 10-100x slower. Their assertions stay the same.
inline bool quick() {
  static const bool q = [] {
    const char* s = std::getenv("FP8ROUTE_TEST_QUICK");
    return s != nullptr && *s != '\0' && std::string(s) != "0";
  }();
  return q;
}

inline std::mt19937_64 make_rng(uint64_t salt = 0) { return std::mt19937_64(test_seed() ^ (salt * 0x9E3779B97F4A7C15ull)); }

}  // namespace fp8route::test

#pragma once
// The one error type of fp8route. Every message names the argument and the rule it broke.

#include <stdexcept>
#include <string>

namespace fp8route {

enum class ErrorCategory {
  invalid_argument,  // the caller passed something the contract forbids
  unsupported,       // valid input this build, backend or GPU cannot run
  cuda_error,        // a CUDA runtime, driver or cuBLAS call failed
  io_error,          // a file could not be read or parsed
  timeout,           // GPU work run on the caller's behalf (a probe's timing) did not finish within its bound
};

const char* category_name(ErrorCategory c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message);
  ErrorCategory category() const noexcept { return category_; }

 private:
  ErrorCategory category_;
};

namespace detail {
[[noreturn]] void throw_error(ErrorCategory category, const char* file, int line,
                              const std::string& message);
}  // namespace detail

}  // namespace fp8route

// Host-side check: throws fp8route::Error(invalid_argument) with file and line when cond is false.
// `msg` is a streamable expression: FP8ROUTE_CHECK(x.ndim == 2, "x: expected 2 dims, got " << x.ndim).
#define FP8ROUTE_CHECK(cond, msg) FP8ROUTE_CHECK_CAT(cond, ::fp8route::ErrorCategory::invalid_argument, msg)

#define FP8ROUTE_CHECK_CAT(cond, category, msg)                                  \
  do {                                                                           \
    if (!(cond)) {                                                               \
      ::std::ostringstream fp8route_check_os_;                                   \
      fp8route_check_os_ << msg;                                                 \
      ::fp8route::detail::throw_error((category), __FILE__, __LINE__,            \
                                      fp8route_check_os_.str());                 \
    }                                                                            \
  } while (0)

#define FP8ROUTE_FAIL(category, msg) FP8ROUTE_CHECK_CAT(false, category, msg)

#include <sstream>

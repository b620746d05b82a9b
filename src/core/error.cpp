#include "fp8route/error.h"

#include <cstring>
#include <sstream>

#include "fp8route/tuning/cuda_check.h"

namespace fp8route {

const char* category_name(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::invalid_argument: return "invalid argument";
    case ErrorCategory::unsupported: return "unsupported";
    case ErrorCategory::cuda_error: return "CUDA error";
    case ErrorCategory::io_error: return "I/O error";
    case ErrorCategory::timeout: return "timeout";
  }
  return "error";
}

Error::Error(ErrorCategory category, const std::string& message)
    : std::runtime_error(message), category_(category) {}

namespace detail {

static const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

void throw_error(ErrorCategory category, const char* file, int line, const std::string& message) {
  std::ostringstream os;
  os << "fp8route " << category_name(category) << ": " << message << " [" << basename_of(file)
     << ":" << line << "]";
  throw Error(category, os.str());
}

void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << call << " failed: " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")";
  throw_error(ErrorCategory::cuda_error, file, line, os.str());
}

void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << call << " failed: cuBLAS status " << static_cast<int>(s);
  throw_error(ErrorCategory::cuda_error, file, line, os.str());
}

}  // namespace detail
}  // namespace fp8route

#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "fp8route/device.h"
#include "fp8route/dtype.h"
#include "fp8route/error.h"
#include "fp8route/scale_kind.h"
#include "fp8route/status.h"
#include "fp8route/tensor.h"
#include "fp8route/tuning/env.h"
#include "test_util.h"

namespace fp8route {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4);
  EXPECT_EQ(dtype_size(DType::f16), 2);
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(dtype_size(DType::e4m3), 1);
  EXPECT_EQ(dtype_size(DType::i8), 1);
  EXPECT_EQ(dtype_size(DType::i32), 4);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::i8, DType::i32})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::e4m3);
}

TEST(DType, UnknownNameNamesTheArgument) {
  try {
    parse_dtype("fp4", "out_dtype");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("out_dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp4"), std::string::npos) << e.what();
  }
}

TEST(ScaleKind, ParseRoundTrip) {
  for (ScaleKind k : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block})
    EXPECT_EQ(parse_scale_kind(name(k)), k);
  EXPECT_THROW(parse_scale_kind("channel"), Error);
}

TEST(Error, CheckMacroCarriesFileLineAndCategory) {
  try {
    FP8ROUTE_CHECK(1 + 1 == 3, "x: rule broken, got " << 42);
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument);
    EXPECT_NE(m.find("x: rule broken, got 42"), std::string::npos) << m;
    EXPECT_NE(m.find("test_core.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("invalid argument"), std::string::npos) << m;
  }
  try {
    FP8ROUTE_FAIL(ErrorCategory::unsupported, "backend: no kernel");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::unsupported);
  }
}

TEST(TensorView, ContiguousAndStrided) {
  float buf[24];
  TensorView t = TensorView::contiguous(buf, DType::f32, {2, 3, 4}, Device::cpu());
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_TRUE(t.is_contiguous());
  TensorView s = TensorView::strided(buf, DType::f32, {2, 3}, {8, 1}, Device::cpu());
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(to_string(s), "f32[2,3] strides [8,1] cpu");
  EXPECT_THROW(TensorView::strided(buf, DType::f32, {2, 3}, {1}, Device::cpu()), Error);
}

TEST(Device, CountNeverThrows) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda_unavailable_reason().empty());
    try {
      device_info(0);
      FAIL() << "device_info without a GPU must throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::cuda_error);
    }
  }
}

TEST(Device, InfoIsCachedAndSane) {
  FP8ROUTE_REQUIRE_SM90();
  const DeviceInfo& a = device_info(0);
  const DeviceInfo& b = device_info(0);
  EXPECT_EQ(&a, &b) << "properties must be queried once and cached";
  EXPECT_GT(a.sm_count, 0);
  EXPECT_GT(a.l2_bytes, 0);
  EXPECT_EQ(a.sm_version(), 90);
  EXPECT_THROW(device_info(cuda_device_count()), Error);
}

TEST(Versions, Reported) {
  const LibraryVersions v = library_versions();
  EXPECT_FALSE(v.fp8route.empty());
  EXPECT_GE(v.cuda_runtime, 13000);
  EXPECT_GE(v.cublaslt, 130000);
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cublas_version_string(130100), "13.1.0");
}

TEST(Status, EveryComponentSaysWhy) {
  for (const auto& c : component_status(cuda_device_count() > 0 ? 0 : -1)) {
    EXPECT_FALSE(c.name.empty());
    EXPECT_FALSE(c.reason.empty()) << c.name;
  }
}

// Every environment variable is read through fp8route::env: an unlisted name is a programming error
// named in the exception, an empty value counts as unset, and seconds parse strictly.
TEST(Env, ReadsOnlyListedVariablesAndParsesSeconds) {
  EXPECT_THROW(
      {
        try {
          (void)env::get("FP8ROUTE_NOT_A_VARIABLE");
        } catch (const Error& e) {
          EXPECT_EQ(e.category(), ErrorCategory::invalid_argument);
          EXPECT_NE(std::string(e.what()).find("FP8ROUTE_NOT_A_VARIABLE"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  for (const env::Variable& v : env::variables()) {
    EXPECT_FALSE(v.meaning.empty()) << v.name;
    EXPECT_TRUE(v.reader == "library" || v.reader == "cli" || v.reader == "python") << v.name;
  }
  const char* name = "FP8ROUTE_AUTOPROBE_CALL_BUDGET";
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  std::string bad;
  setenv(name, "", 1);
  EXPECT_FALSE(env::get(name));
  EXPECT_FALSE(env::seconds(name, &bad));
  EXPECT_EQ(bad, "");
  setenv(name, "1.5", 1);
  EXPECT_EQ(env::seconds(name, &bad).value_or(-1), 1.5);
  for (const char* text : {"soon", "-1", "nan", "inf", "2s"}) {
    setenv(name, text, 1);
    bad.clear();
    EXPECT_FALSE(env::seconds(name, &bad)) << text;
    EXPECT_EQ(bad, text);
  }
  if (old) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
}

}  // namespace
}  // namespace fp8route

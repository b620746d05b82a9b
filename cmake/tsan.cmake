# ThreadSanitizer over the host code, inside the normal build (docs/design.md, "Sanitizers"): the
# library's C++ sources (its .cpp files: router and tables, probe cache, automatic probing, route
# log, the backends' host parts) compiled a second time, with -fsanitize=thread, into the object
# library fp8route_host_tsan. tests/CMakeLists.txt links those objects with the library's own CUDA
# objects (the .cu files, kernels and their launchers, uninstrumented and never compiled twice) into
# the suites that share host state between threads, tests/tsan/<suite>, ctest "tsan_<suite>".
# Included from CMakeLists.txt after the fp8route target is complete: the source-file properties set
# there (table.cpp's install data folder, cutlass_sm90.cpp's FP8ROUTE_HAVE_CUTLASS) are this
# directory's, and apply to the second compile too.
#
# Why the uninstrumented CUDA objects are sound there, and what keeps them so (the ctest entry
# tsan_cuda_host_sync, cmake/tsan_cuda_check.cmake): docs/design.md, "Sanitizers".
option(FP8ROUTE_TSAN_TESTS "Build the ThreadSanitizer suites (tests/tsan/, ctest tsan_*) beside the normal ones" ON)
if(NOT (FP8ROUTE_TSAN_TESTS AND FP8ROUTE_BUILD_TESTS))
  return()
endif()
if(FP8ROUTE_SANITIZE)
  # The whole build is instrumented already (scripts/tsan.sh --full): its own suites are the ones to run.
  message(STATUS "fp8route: FP8ROUTE_SANITIZE=${FP8ROUTE_SANITIZE}: no separate ThreadSanitizer suites")
  return()
endif()
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS -fsanitize=thread)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
set(CMAKE_REQUIRED_QUIET ON)
check_cxx_source_compiles("#include <thread>\nint main() { std::thread t([] {}); t.join(); }" FP8ROUTE_HAVE_TSAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
unset(CMAKE_REQUIRED_QUIET)
if(NOT FP8ROUTE_HAVE_TSAN)
  message(WARNING "fp8route: ${CMAKE_CXX_COMPILER} cannot build with -fsanitize=thread (GCC: its libtsan, "
          "e.g. Debian's libtsan2): the ThreadSanitizer suites are not built (-DFP8ROUTE_TSAN_TESTS=OFF says so quietly)")
  return()
endif()

# -O1: TSan's advice (-O1 or -O2), and the cheaper compile of the two; -g1: file and line in reports.
# After the build type's flags, so -O1 wins over Release's -O3.
set(FP8ROUTE_TSAN_COMPILE_OPTIONS -fsanitize=thread -O1 -g1)
get_target_property(_fp8route_sources fp8route SOURCES)
list(FILTER _fp8route_sources INCLUDE REGEX "\\.cpp$")
add_library(fp8route_host_tsan OBJECT ${_fp8route_sources})
# Everything else as the library's own compile of these files.
target_include_directories(fp8route_host_tsan PRIVATE $<TARGET_PROPERTY:fp8route,INCLUDE_DIRECTORIES>)
target_compile_definitions(fp8route_host_tsan PRIVATE $<TARGET_PROPERTY:fp8route,COMPILE_DEFINITIONS>)
target_compile_options(fp8route_host_tsan PRIVATE $<TARGET_PROPERTY:fp8route,COMPILE_OPTIONS>
                       ${FP8ROUTE_TSAN_COMPILE_OPTIONS})
target_link_libraries(fp8route_host_tsan PRIVATE CUDA::cudart_static CUDA::cublasLt nlohmann_json::nlohmann_json)
if(TARGET fp8route::cutlass)
  target_link_libraries(fp8route_host_tsan PRIVATE fp8route::cutlass)
endif()
# The library's own CUDA objects (compiled once, for fp8route), in an archive of their own: linked
# after every instrumented object, so that an inline function defined both there and in an
# instrumented object is taken from the instrumented one (the linker keeps the first it meets).
add_library(fp8route_cuda_part STATIC "$<FILTER:$<TARGET_OBJECTS:fp8route>,EXCLUDE,\\.cpp\\.o$>")
set_target_properties(fp8route_cuda_part PROPERTIES LINKER_LANGUAGE CXX)

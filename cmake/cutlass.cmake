# CUTLASS/CuTe headers from the nvidia-cutlass pip package (scripts/setup.sh installs it into the
# build's virtual environment). The include folder is asked of the installed package, never
# hard-coded: cutlass_library/source/include inside it. flashinfer-python ships the same headers
# under flashinfer/data/cutlass/include and is tried second.
# Result: FP8ROUTE_CUTLASS_INCLUDE (empty if not found) and, when found, the INTERFACE target
# fp8route::cutlass.
set(FP8ROUTE_PYTHON "${PROJECT_SOURCE_DIR}/build/venv/bin/python" CACHE FILEPATH
    "Python of the virtual environment holding nvidia-cutlass")
set(FP8ROUTE_CUTLASS_INCLUDE "" CACHE PATH "CUTLASS include folder (found from the pip package when empty)")
# OFF: a build without the CUTLASS backend (minutes instead of ~20 on two cores), for work on the
# other parts; the backend then reports itself unsupported on every problem.
option(FP8ROUTE_WITH_CUTLASS "Build the CUTLASS SM90 backend" ON)
if(NOT FP8ROUTE_WITH_CUTLASS)
  set(FP8ROUTE_CUTLASS_INCLUDE "")
elseif(NOT FP8ROUTE_CUTLASS_INCLUDE AND EXISTS "${FP8ROUTE_PYTHON}")
  execute_process(
    COMMAND "${FP8ROUTE_PYTHON}" -c [=[
import importlib.util, os
for mod, sub in (("cutlass_library", ("source", "include")), ("flashinfer", ("data", "cutlass", "include"))):
    spec = importlib.util.find_spec(mod)
    if spec and spec.origin:
        inc = os.path.join(os.path.dirname(spec.origin), *sub)
        if os.path.isfile(os.path.join(inc, "cutlass", "cutlass.h")):
            print(inc)
            break
]=]
    OUTPUT_VARIABLE _cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _cutlass_inc)
    set(FP8ROUTE_CUTLASS_INCLUDE "${_cutlass_inc}" CACHE PATH "CUTLASS include folder" FORCE)
  endif()
endif()
if(FP8ROUTE_CUTLASS_INCLUDE)
  message(STATUS "fp8route: CUTLASS headers in ${FP8ROUTE_CUTLASS_INCLUDE}")
  add_library(fp8route_cutlass INTERFACE)
  add_library(fp8route::cutlass ALIAS fp8route_cutlass)
  target_include_directories(fp8route_cutlass SYSTEM INTERFACE "${FP8ROUTE_CUTLASS_INCLUDE}")
elseif(FP8ROUTE_WITH_CUTLASS)
  message(STATUS "fp8route: CUTLASS headers not found (run scripts/setup.sh); CUTLASS kernels cannot be built")
endif()

# CUTLASS/CuTe headers from the nvidia-cutlass pip package (scripts/setup.sh installs it into the
# build's virtual environment). The include folder is asked of the installed package, never
# hard-coded: cutlass_library/source/include inside it. flashinfer-python ships the same headers
# under flashinfer/data/cutlass/include and is tried second.
# Result: FP8ROUTE_CUTLASS_INCLUDE (empty if not found) and, when found, the INTERFACE target
# fp8route::cutlass. Under pip (SKBUILD) headers not found stop the build, unless the backend was
# turned off (FP8ROUTE_WITH_CUTLASS=OFF); an FP8ROUTE_CUTLASS_INCLUDE given without
# cutlass/cutlass.h stops any build.
set(FP8ROUTE_PYTHON "${PROJECT_SOURCE_DIR}/build/venv/bin/python" CACHE FILEPATH
    "Python of the virtual environment holding nvidia-cutlass")
set(FP8ROUTE_CUTLASS_INCLUDE "" CACHE PATH "CUTLASS include folder (found from the pip package when empty)")
# OFF: a build without the CUTLASS backend (minutes instead of ~20 on two cores), for work on the
# other parts; the backend then reports itself unsupported on every problem.
option(FP8ROUTE_WITH_CUTLASS "Build the CUTLASS SM90 backend" ON)
# The Pythons asked for the package: FP8ROUTE_PYTHON, then under pip the build's own (its
# environment; with --no-build-isolation, the Python running pip).
set(_fp8route_cutlass_pythons "")
if(EXISTS "${FP8ROUTE_PYTHON}")
  list(APPEND _fp8route_cutlass_pythons "${FP8ROUTE_PYTHON}")
endif()
if(SKBUILD AND Python_EXECUTABLE AND NOT Python_EXECUTABLE STREQUAL FP8ROUTE_PYTHON)
  list(APPEND _fp8route_cutlass_pythons "${Python_EXECUTABLE}")
endif()
if(NOT FP8ROUTE_WITH_CUTLASS)
  set(FP8ROUTE_CUTLASS_INCLUDE "")
else()
  if(FP8ROUTE_CUTLASS_INCLUDE AND NOT EXISTS "${FP8ROUTE_CUTLASS_INCLUDE}/cutlass/cutlass.h")
    if(FP8ROUTE_CUTLASS_INCLUDE STREQUAL _FP8ROUTE_CUTLASS_INCLUDE_FOUND)
      # Found in a Python package since removed: look again.
      set(FP8ROUTE_CUTLASS_INCLUDE "" CACHE PATH "CUTLASS include folder" FORCE)
    else()
      message(FATAL_ERROR "fp8route: FP8ROUTE_CUTLASS_INCLUDE=${FP8ROUTE_CUTLASS_INCLUDE} holds no "
              "cutlass/cutlass.h. Name a CUTLASS include folder, leave it empty to look in the Python "
              "packages, or build without the CUTLASS backend (-DFP8ROUTE_WITH_CUTLASS=OFF).")
    endif()
  endif()
  if(NOT FP8ROUTE_CUTLASS_INCLUDE)
    foreach(_py IN LISTS _fp8route_cutlass_pythons)
      # pip's isolated build environment (PYTHONPATH) hides the site-packages of the Python that
      # runs pip, build/venv's included: FP8ROUTE_PYTHON is asked without it.
      set(_env "")
      if(SKBUILD AND _py STREQUAL FP8ROUTE_PYTHON)
        set(_env "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH)
      endif()
      execute_process(
        COMMAND ${_env} "${_py}" -c [=[
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
        set(_FP8ROUTE_CUTLASS_INCLUDE_FOUND "${_cutlass_inc}" CACHE INTERNAL "")
        break()
      endif()
    endforeach()
  endif()
endif()
if(FP8ROUTE_CUTLASS_INCLUDE)
  message(STATUS "fp8route: CUTLASS headers in ${FP8ROUTE_CUTLASS_INCLUDE}")
  add_library(fp8route_cutlass INTERFACE)
  add_library(fp8route::cutlass ALIAS fp8route_cutlass)
  target_include_directories(fp8route_cutlass SYSTEM INTERFACE "${FP8ROUTE_CUTLASS_INCLUDE}")
elseif(FP8ROUTE_WITH_CUTLASS AND SKBUILD)
  # A wheel without a backend the shipped routing table routes to is asked for, never built by
  # accident.
  list(JOIN _fp8route_cutlass_pythons ", " _asked)
  message(FATAL_ERROR "fp8route: the CUTLASS headers were not found (no nvidia-cutlass or flashinfer "
          "package importable by: ${_asked}). Either\n"
          "  - install them: python -m pip install --no-deps nvidia-cutlass==4.2.0.0 into build/venv "
          "(scripts/setup.sh does), or into this Python and build with pip install --no-build-isolation .\n"
          "  - or name the folder: pip install . --config-settings=cmake.define.FP8ROUTE_CUTLASS_INCLUDE=<cutlass>/include\n"
          "  - or build the wheel without the CUTLASS backend: "
          "pip install . --config-settings=cmake.define.FP8ROUTE_WITH_CUTLASS=OFF")
elseif(FP8ROUTE_WITH_CUTLASS)
  message(STATUS "fp8route: CUTLASS headers not found (run scripts/setup.sh); CUTLASS kernels cannot be built")
endif()

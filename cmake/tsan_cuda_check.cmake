# The ctest entry tsan_cuda_host_sync (tests/CMakeLists.txt): the ThreadSanitizer suites link the
# library's CUDA objects uninstrumented (cmake/tsan.cmake), which is sound while their host code
# synchronizes only through calls ThreadSanitizer intercepts (pthread mutexes, pthread_once, the
# guards of function-local statics). An atomic instruction there (std::atomic, a shared_ptr's count,
# a seq_cst fence) or a call into libatomic would order threads where ThreadSanitizer cannot see it:
# false race reports, or races hidden. This lists the functions of those objects that hold one; a
# JUnit report with one test case goes to JUNIT.
#   cmake -DARCHIVE=libfp8route_cuda_part.a -DOBJDUMP=objdump -DJUNIT=report.xml -P tsan_cuda_check.cmake
foreach(_v ARCHIVE OBJDUMP JUNIT)
  if(NOT ${_v})
    message(FATAL_ERROR "tsan_cuda_check: -D${_v}= missing")
  endif()
endforeach()

# Per function (demangled): x86-64 atomics are lock-prefixed instructions, xchg with a memory operand
# (locked without the prefix) and mfence; libatomic calls show in the relocations (-r).
execute_process(
  COMMAND "${OBJDUMP}" -drC --no-show-raw-insn "${ARCHIVE}"
  COMMAND awk [=[
    /^[^ \t]+\.o: +file format/ { obj = $1; sub(/:$/, "", obj) }
    /^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn) }
    /\tlock / || (/\txchg/ && /\(/) || /\tmfence/ || /R_X86_64_[A-Z0-9_]+[ \t]+__(atomic|sync)_/ {
      if (!seen[obj "|" fn]++) print obj ": " fn
    }]=]
  RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _hits
  ERROR_VARIABLE _err)
set(_name "the library's CUDA objects synchronize threads only through calls ThreadSanitizer intercepts")
if(NOT _rc EQUAL 0)
  set(_failure "could not disassemble ${ARCHIVE} (${OBJDUMP}: ${_rc} ${_err})")
elseif(_hits)
  string(CONCAT _failure "host code in the library's CUDA objects, which the ThreadSanitizer suites link "
         "uninstrumented, uses atomic instructions (std::atomic, shared_ptr, fences): ThreadSanitizer cannot "
         "see that synchronization. Move the shared state into a .cpp file of the library (instrumented in "
         "fp8route_host_tsan), or instrument everything (scripts/tsan.sh --full). The functions:\n${_hits}")
else()
  set(_failure "")
endif()

if(_failure)
  string(REPLACE "&" "&amp;" _xml "${_failure}")
  string(REPLACE "<" "&lt;" _xml "${_xml}")
  string(REPLACE ">" "&gt;" _xml "${_xml}")
  string(REPLACE "\"" "&quot;" _xml "${_xml}")
  set(_case "<testcase classname=\"tsan\" name=\"${_name}\"><failure message=\"${_xml}\"/></testcase>")
else()
  set(_case "<testcase classname=\"tsan\" name=\"${_name}\"/>")
endif()
file(WRITE "${JUNIT}" "<?xml version=\"1.0\"?><testsuite name=\"tsan_cuda_host_sync\">${_case}</testsuite>\n")
if(_failure)
  message(FATAL_ERROR "tsan_cuda_check: ${_failure}")
endif()
message(STATUS "tsan_cuda_check: no atomic instruction in the host code of ${ARCHIVE}")

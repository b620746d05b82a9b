// Linked into every test suite: automatic probing (route.h) off from the start, so that the suites
// route by the table they check and write nothing to the user's probe cache. test_autoprobe sets
// its own configuration per test.

#include "fp8route/route.h"

namespace {
const bool kAutoProbeOff = [] {
  fp8route::set_autoprobe(false);
  return true;
}();
}  // namespace

#pragma once
// Measured routing, all of it: routing tables (table.h), the Router and the process-wide router
// (router.h), probing and automatic probing (probe.h). Include the one a file needs; this header
// stays for code written against it.

#include "fp8route/probe.h"
#include "fp8route/router.h"
#include "fp8route/table.h"

#pragma once
// TableStamp -> nlohmann::json, for the JSON written line by line (tune's raw file, the Python
// module's table_info). Reading is checked field by field where it happens (table.cpp, tune_raw.cpp).

#include <nlohmann/json.hpp>

#include "fp8route/route.h"

namespace fp8route {

inline void to_json(nlohmann::json& j, const TableStamp& s) {
  j = {{"gpu", s.gpu}, {"sm_count", s.sm_count}, {"cuda", s.cuda}, {"cublaslt", s.cublaslt},
       {"fp8route", s.fp8route}, {"date", s.date}};
}

}  // namespace fp8route

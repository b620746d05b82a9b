#pragma once
// TableStamp <-> nlohmann::json, for the JSON written line by line (tune's raw file, the Python
// module's table_info). The routing-table file itself is written and checked by table.cpp.

#include <nlohmann/json.hpp>

#include "fp8route/route.h"

namespace fp8route {

inline void to_json(nlohmann::json& j, const TableStamp& s) {
  j = {{"gpu", s.gpu}, {"sm_count", s.sm_count}, {"cuda", s.cuda}, {"cublaslt", s.cublaslt},
       {"fp8route", s.fp8route}, {"date", s.date}};
}

inline void from_json(const nlohmann::json& j, TableStamp& s) {
  s = {j.at("gpu").get<std::string>(), j.at("sm_count").get<int>(),       j.at("cuda").get<std::string>(),
       j.at("cublaslt").get<std::string>(), j.at("fp8route").get<std::string>(), j.at("date").get<std::string>()};
}

}  // namespace fp8route

#pragma once
// The fields a routing table and tune's raw file share (a backend name, an output dtype, a stamp),
// read and checked alike by both (table.cpp, tune_raw.cpp).

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fp8route/tuning/json_reader.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"

namespace fp8route {

struct RecordReader : json_reader::Reader {
  RecordReader(const std::string& source, const std::vector<std::string>& known)
      : json_reader::Reader(source), known(known) {}

  // One of this build's backends.
  std::string backend(const json_reader::Json& v, const std::string& where) const {
    std::string b = str(v, where);
    if (std::find(known.begin(), known.end(), b) == known.end())
      fail(where, "unknown backend '" + json_reader::printable(b, 60) + "'");
    return b;
  }
  // What scaled_mm writes.
  DType out(const json_reader::Json& v, const std::string& where) const {
    const std::string s = str(v, where);
    if (s != "bf16" && s != "f16") fail(where, "expected bf16 or f16, got " + json_reader::describe(v));
    return parse_dtype(s);
  }
  // The document of a file that names its format and version: the text (not blank), parsed, an
  // object whose "format" is `format` and whose "version" is `version`.
  json_reader::Json document(const std::string& text, const char* format, int64_t version) const {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) fail("file", "empty");
    json_reader::Json j = parse(text);
    object(j, "");
    if (str(field(j, "format", ""), "format") != format) fail("format", std::string("expected \"") + format + "\"");
    integer(field(j, "version", ""), "version", version, version);
    return j;
  }
  // The document of the file at `path`, as document() checks it ("file: cannot open" if unreadable).
  json_reader::Json document_file(const std::string& path, const char* format, int64_t version) const {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("file", "cannot open");
    std::stringstream buf;
    buf << in.rdbuf();
    return document(buf.str(), format, version);
  }
  TableStamp stamp(const json_reader::Json& s) const {
    object(s, "stamp");
    return {str(field(s, "gpu", "stamp"), "stamp.gpu"),
            static_cast<int>(integer(field(s, "sm_count", "stamp"), "stamp.sm_count", 1, INT32_MAX)),
            str(field(s, "cuda", "stamp"), "stamp.cuda"),
            str(field(s, "cublaslt", "stamp"), "stamp.cublaslt"),
            str(field(s, "fp8route", "stamp"), "stamp.fp8route"),
            str(field(s, "date", "stamp"), "stamp.date")};
  }

  const std::vector<std::string>& known;  // gemm_backends()
};

}  // namespace fp8route

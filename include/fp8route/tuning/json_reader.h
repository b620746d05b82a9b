#pragma once
// Reading JSON that anyone may have edited or damaged: routing tables, tune's raw file, the shape
// catalog. Every failure is an Error(io_error) "<source>: <JSON path>: <what>", and no input can
// crash the reader or the code after it:
// - nesting is bounded while parsing: nlohmann's parser is iterative, but dump(), comparison and
//   conversions recurse, so 100k nested arrays overflow the stack later, in an error message;
// - a number beyond double's range is an error of its own (nlohmann throws out_of_range, not
//   parse_error, for it);
// - a key given twice in one object is an error (nlohmann keeps the last silently);
// - messages quote input through printable(): nlohmann's parse errors quote the bytes they stopped
//   at, which need not be UTF-8, and a message that is not UTF-8 cannot go into JSON output.
// Host code only (nlohmann and the standard library): the fuzz targets build it with clang.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp8route/error.h"

namespace fp8route::json_reader {

using Json = nlohmann::json;

// Deeper than any of the formats nests (a routing table's breakpoint is 5 levels down).
inline constexpr size_t kMaxDepth = 32;
// M, N, K and breakpoints: every GEMM backend takes dimensions below 2^31.
inline constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;

// `s` as valid UTF-8 without control characters: every other byte written as \xNN; cut to at most
// `max_bytes` (then ending in "...").
inline std::string printable(std::string_view s, size_t max_bytes = 200) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  const auto escape = [&](unsigned char c) { out += "\\x", out += kHex[c >> 4], out += kHex[c & 15]; };
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= max_bytes) return out + "...";
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      escape(c), ++i;
      continue;
    }
    if (c < 0x80) {
      out += char(c), ++i;
      continue;
    }
    // The length and the valid range of the second byte (RFC 3629: no overlong forms, no
    // surrogates, nothing above U+10FFFF).
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t j = 1; ok && j < len; ++j) {
      const auto b = static_cast<unsigned char>(s[i + j]);
      ok = j == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (ok) {
      out.append(s.substr(i, len)), i += len;
    } else {
      escape(c), ++i;
    }
  }
  return out;
}

// "entries[3]" + "n" -> "entries[3].n"; "" + "n" -> "n".
inline std::string member(const std::string& where, std::string_view key) {
  return (where.empty() ? "" : where + ".") + printable(key, 40);
}
inline std::string element(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

// A value for a message: scalars as JSON (cut short), containers by kind, never recursively.
inline std::string describe(const Json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object";
  return printable(v.dump(-1, ' ', false, Json::error_handler_t::replace), 60);
}

namespace detail {

// nlohmann's DOM built through its SAX interface, to bound nesting, refuse repeated keys and know
// the JSON path of the value at which parsing stopped.
class Builder final : public nlohmann::json_sax<Json> {
 public:
  explicit Builder(Json& root) : root_(root) {}

  bool null() override { return put(Json(nullptr)); }
  bool boolean(bool v) override { return put(Json(v)); }
  bool number_integer(number_integer_t v) override { return put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(Json(v)); }
  bool string(string_t& v) override { return put(Json(std::move(v))); }
  bool binary(binary_t& v) override { return put(Json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(Json::object()); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    f.key = k;
    f.has_key = true;
    if (f.node->contains(k)) {
      error = "the key appears twice in one object";
      return false;
    }
    return true;
  }
  bool parse_error(std::size_t byte, const std::string& token, const Json::exception& e) override {
    error_byte = byte;
    error_id = e.id;
    error_token = token;
    error = e.what();
    return false;
  }

  // The JSON path of the value being read ("" at the top level).
  std::string path() const {
    std::string p;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      const bool last = i + 1 == stack_.size();
      if (f.node->is_array()) {
        // An open child was counted when placed; the value being read at the top is not yet.
        p = element(p, last ? f.count : f.count - 1);
      } else if (f.has_key) {
        p = member(p, f.key);
      }
    }
    return p;
  }

  std::string error;       // what stopped the parse ("" when it did not stop)
  size_t error_byte = 0;   // for a parse error: bytes read
  int error_id = 0;        // for a parse error: nlohmann's exception id (406: number out of range)
  std::string error_token;

 private:
  struct Frame {
    Json* node;
    size_t count = 0;  // values placed into it
    std::string key;   // an object's current key
    bool has_key = false;
  };

  Json* place(Json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = stack_.back();
    ++f.count;
    if (f.node->is_array()) {
      f.node->push_back(std::move(v));
      return &f.node->back();
    }
    Json& slot = (*f.node)[f.key];
    slot = std::move(v);
    return &slot;
  }
  bool put(Json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(Json&& v) {
    if (stack_.size() >= kMaxDepth) {
      error = "arrays and objects nested deeper than " + std::to_string(kMaxDepth);
      return false;
    }
    Json* node = place(std::move(v));
    stack_.push_back(Frame{node, 0, {}, false});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  Json& root_;
  std::vector<Frame> stack_;
};

}  // namespace detail

// Field access and checks; every failure names the source (a file, or "file:line"), the JSON path
// and the rule.
class Reader {
 public:
  explicit Reader(std::string source) : source_(printable(source, 1000)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    FP8ROUTE_FAIL(ErrorCategory::io_error, source_ << ": " << (where.empty() ? "top level" : where) << ": " << what);
  }

  Json parse(std::string_view text) const {
    Json j;
    detail::Builder b(j);
    if (Json::sax_parse(text.begin(), text.end(), &b)) return j;
    const std::string path = b.path();
    if (b.error_id == 0) fail(path, b.error);  // nesting or a repeated key
    const std::string at = (path.empty() ? "" : path + " ") + "(byte " + std::to_string(b.error_byte) + ")";
    if (b.error_id == 406) fail(at, "number out of range: " + printable(b.error_token, 60));
    // nlohmann reports a cut-off document as an error at its last byte.
    const bool truncated = b.error_byte >= text.size();
    fail(at, std::string(truncated ? "truncated JSON (" : "not JSON (") + printable(b.error, 300) + ")");
  }

  const Json& object(const Json& v, const std::string& where) const {
    if (!v.is_object()) fail(where, "expected an object, got " + describe(v));
    return v;
  }
  const Json& array(const Json& v, const std::string& where, size_t min_size = 0) const {
    if (!v.is_array() || v.size() < min_size)
      fail(where, (min_size ? "expected an array of at least " + std::to_string(min_size) + " elements"
                            : std::string("expected an array")) + ", got " + describe(v));
    return v;
  }
  const Json& field(const Json& obj, const char* key, const std::string& where) const {
    object(obj, where);
    const auto it = obj.find(key);
    if (it == obj.end()) fail(where, std::string("missing field '") + key + "'");
    return *it;
  }
  // nullptr when obj has no such key.
  const Json* optional_field(const Json& obj, const char* key, const std::string& where) const {
    object(obj, where);
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const Json& at(const Json& arr, size_t i, const std::string& where) const {
    return array(arr, where, i + 1)[i];
  }
  std::string str(const Json& v, const std::string& where, bool non_empty = false) const {
    if (!v.is_string() || (non_empty && v.get_ref<const std::string&>().empty()))
      fail(where,
           std::string(non_empty ? "expected a non-empty string" : "expected a string") + ", got " + describe(v));
    return v.get<std::string>();
  }
  bool boolean(const Json& v, const std::string& where) const {
    if (!v.is_boolean()) fail(where, "expected true or false, got " + describe(v));
    return v.get<bool>();
  }
  // An integer in [lo, hi] (a number with a fraction or an exponent is not one).
  int64_t integer(const Json& v, const std::string& where, int64_t lo, int64_t hi) const {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (hi >= 0 && u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo) return static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if (i >= lo && i <= hi) return i;
    }
    fail(where, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + describe(v));
  }
  // A finite number > 0 (JSON has no infinities; a literal beyond double's range fails in parse()).
  double positive(const Json& v, const std::string& where, const char* what = "a positive number") const {
    if (!v.is_number() || !(v.get<double>() > 0)) fail(where, std::string("expected ") + what + ", got " + describe(v));
    return v.get<double>();
  }

  // Runs f, turning an Error it throws (a name parse_scale_kind or parse_dtype does not know) into
  // one about this file at `where`.
  template <class F>
  auto parsed(F f, const std::string& where) const {
    try {
      return f();
    } catch (const Error& e) {
      fail(where, e.what());
    }
  }

 private:
  std::string source_;
};

}  // namespace fp8route::json_reader

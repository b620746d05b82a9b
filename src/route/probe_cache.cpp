// The probe cache's files (probe_cache.h; format in docs/routing.md, "Automatic probing").

#include "fp8route/tuning/env.h"
#include "fp8route/tuning/probe_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fp8route/tuning/json_reader.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/tuning/record_reader.h"

namespace fp8route::probe_cache {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using json_reader::element;
using json_reader::kMaxDim;
using json_reader::member;

constexpr const char* kFormat = "fp8route-probe-cache";
constexpr int kFormatVersion = 1;
constexpr double kMaxUs = 1e12;  // as tune's raw file: no GEMM takes 11 days

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-' ? c : '_';
  return out;
}

}  // namespace

std::string to_string(const Key& key) {
  return std::string(name(key.scale)) + " " + std::string(dtype_name(key.out)) + " n=" + std::to_string(key.n) +
         " k=" + std::to_string(key.k);
}

bool same_machine(const TableStamp& a, const TableStamp& b) {
  return a.gpu == b.gpu && a.sm_count == b.sm_count && a.cuda == b.cuda && a.cublaslt == b.cublaslt &&
         a.fp8route == b.fp8route;
}

std::optional<TableStamp> machine_here() {
  if (cuda_device_count() == 0) return std::nullopt;
  static const LibraryVersions v = library_versions();
  const DeviceInfo& d = device_info();
  TableStamp s{d.name, d.sm_count, cuda_version_string(v.cuda_runtime), cublas_version_string(v.cublaslt),
               v.fp8route, ""};
  const std::time_t now = std::time(nullptr);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  s.date = date;
  return s;
}

std::string default_dir() {
  if (const auto d = env::get("FP8ROUTE_CACHE_DIR")) return *d;
  if (const auto x = env::get("XDG_CACHE_HOME"); x && (*x)[0] == '/') return (fs::path(*x) / "fp8route").string();
  if (const auto h = env::get("HOME")) return (fs::path(*h) / ".cache" / "fp8route").string();
  return "";
}

std::string path_of(const std::string& dir, const TableStamp& m, const Key& key) {
  const std::string machine = slug(m.gpu) + "-" + std::to_string(m.sm_count) + "sm-cuda" + slug(m.cuda) +
                              "-cublaslt" + slug(m.cublaslt) + "-fp8route" + slug(m.fp8route);
  const std::string file = std::string(name(key.scale)) + "-" + std::string(dtype_name(key.out)) + "-n" +
                           std::to_string(key.n) + "-k" + std::to_string(key.k) + ".json";
  return (fs::path(dir) / "probes" / machine / file).string();
}

std::string text_of(const File& f) {
  // One measurement per line, as a routing table's: a reader can diff two probes of one shape.
  std::ostringstream os;
  os.precision(17);
  const auto q = [](const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); };
  const TableStamp& s = f.machine;
  os << "{\"format\": " << q(kFormat) << ", \"version\": " << kFormatVersion << ",\n\"machine\": {\"gpu\": " << q(s.gpu)
     << ", \"sm_count\": " << s.sm_count << ", \"cuda\": " << q(s.cuda) << ", \"cublaslt\": " << q(s.cublaslt)
     << ", \"fp8route\": " << q(s.fp8route) << ", \"date\": " << q(s.date) << "},\n\"shape\": {\"scale\": "
     << q(std::string(name(f.key.scale))) << ", \"out\": " << q(std::string(dtype_name(f.key.out)))
     << ", \"n\": " << f.key.n << ", \"k\": " << f.key.k << "},\n\"probe\": {\"caller\": " << q(f.caller)
     << ", \"seconds\": " << f.seconds;
  if (!f.due.empty()) {
    os << ", \"due\": [";
    for (size_t i = 0; i < f.due.size(); ++i) os << (i ? ", " : "") << f.due[i];
    os << "]";
  }
  os << "},\n\"measured\": [";
  for (size_t i = 0; i < f.measured.size(); ++i) {
    const Measured& m = f.measured[i];
    os << (i ? ",\n " : "\n ") << "[" << m.m << ", " << q(m.backend) << ", " << q(m.config) << ", " << m.us << "]";
  }
  os << "]}\n";
  return os.str();
}

File parse(const std::string& text, const std::string& source) {
  const std::vector<std::string> known = gemm_backends();
  const RecordReader rd("probe cache file " + source, known);
  const Json j = rd.document(text, kFormat, kFormatVersion);
  File f;
  {
    // The stamp reader names its fields "stamp.*"; here the object is "machine".
    const Json& m = rd.field(j, "machine", "");
    rd.object(m, "machine");
    f.machine = {rd.str(rd.field(m, "gpu", "machine"), "machine.gpu"),
                 static_cast<int>(rd.integer(rd.field(m, "sm_count", "machine"), "machine.sm_count", 1, INT32_MAX)),
                 rd.str(rd.field(m, "cuda", "machine"), "machine.cuda"),
                 rd.str(rd.field(m, "cublaslt", "machine"), "machine.cublaslt"),
                 rd.str(rd.field(m, "fp8route", "machine"), "machine.fp8route"),
                 rd.str(rd.field(m, "date", "machine"), "machine.date")};
  }
  const Json& shape = rd.object(rd.field(j, "shape", ""), "shape");
  const std::string scale = rd.str(rd.field(shape, "scale", "shape"), "shape.scale");
  f.key.scale = rd.parsed([&] { return parse_scale_kind(scale); }, "shape.scale");
  f.key.out = rd.out(rd.field(shape, "out", "shape"), "shape.out");
  f.key.n = rd.integer(rd.field(shape, "n", "shape"), "shape.n", 1, kMaxDim);
  f.key.k = rd.integer(rd.field(shape, "k", "shape"), "shape.k", 1, kMaxDim);
  const Json& probe = rd.object(rd.field(j, "probe", ""), "probe");
  f.caller = rd.str(rd.field(probe, "caller", "probe"), "probe.caller");
  const Json& secs = rd.field(probe, "seconds", "probe");
  if (!secs.is_number() || !(secs.get<double>() >= 0) || !std::isfinite(secs.get<double>()))
    rd.fail("probe.seconds", "expected a number of seconds >= 0, got " + json_reader::describe(secs));
  f.seconds = secs.get<double>();
  if (const auto it = probe.find("due"); it != probe.end()) {
    const Json& due = rd.array(*it, "probe.due", 0);
    for (size_t i = 0; i < due.size(); ++i) {
      const int64_t m = rd.integer(due[i], element("probe.due", i), 1, kMaxDim);
      if (!f.due.empty() && m <= f.due.back()) rd.fail(element("probe.due", i), "expected M in ascending order, each once");
      f.due.push_back(m);
    }
  }
  const Json& ms = rd.array(rd.field(j, "measured", ""), "measured", 1);
  std::map<std::tuple<int64_t, std::string, std::string>, size_t> seen;
  std::map<std::string, std::vector<std::string>> configs;  // per backend named
  for (size_t r = 0; r < ms.size(); ++r) {
    const std::string w = element("measured", r);
    Measured m{rd.integer(rd.at(ms[r], 0, w), w + "[0] (m)", 1, kMaxDim),
               rd.backend(rd.at(ms[r], 1, w), w + "[1] (backend)"),
               rd.str(rd.at(ms[r], 2, w), w + "[2] (config)", true),
               rd.positive(rd.at(ms[r], 3, w), w + "[3] (us)", "a positive time in microseconds")};
    if (m.us > kMaxUs) rd.fail(w + "[3] (us)", "expected a time of at most 1e12 microseconds");
    // A config this build lacks could not be run: the file is of another build, whatever it says.
    auto [it, fresh] = configs.try_emplace(m.backend);
    if (fresh) it->second = gemm_configs(m.backend);
    if (std::find(it->second.begin(), it->second.end(), m.config) == it->second.end())
      rd.fail(w + "[2] (config)",
              "backend " + m.backend + " has no config '" + json_reader::printable(m.config, 80) + "'");
    if (auto [it, fresh] = seen.try_emplace({m.m, m.backend, m.config}, r); !fresh)
      rd.fail(w, "same (m, backend, config) as " + element("measured", it->second));
    f.measured.push_back(std::move(m));
  }
  return f;
}

void write(const std::string& path, const File& f) {
  const fs::path target(path);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  FP8ROUTE_CHECK_CAT(!ec, ErrorCategory::io_error,
                     "probe cache: cannot make the folder " << target.parent_path().string() << ": " << ec.message());
  // A name no other writer uses (process, thread, count), in the target's folder: rename() is atomic
  // only within one file system.
  static std::atomic<uint64_t> count{0};
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 1000000007) + "." +
                          std::to_string(count.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text_of(f);
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      FP8ROUTE_FAIL(ErrorCategory::io_error, "probe cache: cannot write " << tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    FP8ROUTE_FAIL(ErrorCategory::io_error, "probe cache: cannot rename " << tmp << " to " << path);
  }
}

std::string message_of(const std::exception& e) {
  std::string s = e.what();
  if (dynamic_cast<const Error*>(&e)) {
    if (const size_t head = s.find(": "); s.rfind("fp8route ", 0) == 0 && head != std::string::npos)
      s.erase(0, head + 2);
    if (const size_t tail = s.rfind(" ["); !s.empty() && s.back() == ']' && tail != std::string::npos) s.erase(tail);
  }
  return s;
}

std::optional<File> read(const std::string& path, const TableStamp& machine, const Key& key, std::string& why) {
  why.clear();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  File f;
  try {
    f = parse(buf.str(), path);
  } catch (const std::exception& e) {  // Error for what the file holds; bad_alloc for a huge one
    why = message_of(e);
    return std::nullopt;
  }
  if (!same_machine(f.machine, machine)) {
    why = "probe cache file " + path + ": probed on " + f.machine.gpu + " (" + std::to_string(f.machine.sm_count) +
          " SMs, CUDA " + f.machine.cuda + ", cuBLASLt " + f.machine.cublaslt + ", fp8route " + f.machine.fp8route +
          "), not this machine";
    return std::nullopt;
  }
  if (!(f.key == key)) {
    why = "probe cache file " + path + ": holds " + to_string(f.key) + ", not " + to_string(key);
    return std::nullopt;
  }
  return f;
}

std::vector<Listed> list(const std::string& dir) {
  std::vector<Listed> out;
  std::error_code ec;
  const fs::path root = fs::path(dir) / "probes";
  if (dir.empty() || !fs::is_directory(root, ec)) return out;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->path().extension() != ".json") continue;
    Listed l{it->path().string(), std::nullopt, ""};
    std::ifstream in(l.path, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    try {
      l.file = parse(buf.str(), l.path);
    } catch (const std::exception& e) {
      l.error = message_of(e);
    }
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const Listed& a, const Listed& b) { return a.path < b.path; });
  return out;
}

size_t clear(const std::string& dir) {
  FP8ROUTE_CHECK_CAT(!dir.empty(), ErrorCategory::io_error,
                     "probe cache: no folder (FP8ROUTE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)");
  const fs::path root = fs::path(dir) / "probes";
  std::error_code ec;
  if (!fs::exists(root, ec)) return 0;
  size_t files = 0;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    files += it->is_regular_file(ec);
  fs::remove_all(root, ec);
  FP8ROUTE_CHECK_CAT(!ec, ErrorCategory::io_error,
                     "probe cache: cannot remove " << root.string() << ": " << ec.message());
  return files;
}

}  // namespace fp8route::probe_cache

#pragma once
// The on-disk probe cache of automatic probing (route.h, "Automatic probing"; the format is in
// docs/routing.md): one JSON file per (machine, scale kind, out dtype, N, K),
//   <cache dir>/probes/<machine>/<scale>-<out>-n<N>-k<K>.json
// Files are written whole under a temporary name in the same folder and renamed over the old one, so
// a reader sees the old file or the new one, never a mix, and writers of one file need no lock (the
// last rename wins; every version is a whole probe). Host code only: no GPU is asked here.

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "fp8route/route.h"

namespace fp8route::probe_cache {

// A shape as routing tables key it.
struct Key {
  ScaleKind scale = ScaleKind::tensor;
  DType out = DType::bf16;
  int64_t n = 0, k = 0;
  auto operator<=>(const Key&) const = default;
};
std::string to_string(const Key& key);  // "row bf16 n=4096 k=14336"

struct File {
  TableStamp machine;  // where it was probed; `date` is the day of the probe
  Key key;
  std::string caller;  // AutoProbeRecord::caller
  double seconds = 0;  // what the probes took
  std::vector<Measured> measured;
  std::vector<int64_t> due;  // M of the probe grid not yet timed (a call-bounded probe), ascending
  bool operator==(const File&) const = default;
};

// Two stamps of one machine for the cache: GPU name, SM count, CUDA, cuBLASLt and fp8route versions
// equal (cuBLASLt's "heuristicN" ranks and the configs a build has change with them), date aside.
bool same_machine(const TableStamp& a, const TableStamp& b);

// This machine for the cache: the current device's name and SM count, the library versions, today's
// date (UTC); nullopt without a GPU.
std::optional<TableStamp> machine_here();

// The cache folder the environment names: $FP8ROUTE_CACHE_DIR, else $XDG_CACHE_HOME/fp8route (an
// absolute XDG_CACHE_HOME only, as the XDG specification asks), else $HOME/.cache/fp8route; "" when
// none of them is set.
std::string default_dir();
// <dir>/probes/<machine>/<scale>-<out>-n<N>-k<K>.json, the machine folder named from the stamp
// (characters other than letters, digits, '.', '+' and '-' written as '_').
std::string path_of(const std::string& dir, const TableStamp& machine, const Key& key);

std::string text_of(const File& f);
// Throws Error(io_error) naming `source`, the JSON path and the rule, for anything that is not a
// whole file of this format: times positive and finite, M in [1, 2^31), backends and configs of this
// build, no (m, backend, config) twice, at least one measurement, due M ascending (optional).
File parse(const std::string& text, const std::string& source);

// Writes f to `path` (folders made as needed) through a temporary file in the same folder and a
// rename. Throws Error(io_error) naming the path when it cannot (the temporary file is removed).
void write(const std::string& path, const File& f);

// The file at `path` when it is a whole file of `machine` for `key`. nullopt with `why` "" when there
// is no file; nullopt with `why` saying what is wrong when it is damaged, of another machine or
// version, or of another shape. Never throws for what the file holds.
std::optional<File> read(const std::string& path, const TableStamp& machine, const Key& key, std::string& why);

// An exception's message for a log line or a record: an Error's without its "fp8route <category>: "
// head and " [file:line]" tail.
std::string message_of(const std::exception& e);

// Every file under <dir>/probes, sorted by path: its path and the file, or why it does not read.
struct Listed {
  std::string path;
  std::optional<File> file;
  std::string error;
};
std::vector<Listed> list(const std::string& dir);
// Removes <dir>/probes and everything in it; the number of files removed. Throws Error(io_error).
size_t clear(const std::string& dir);

}  // namespace fp8route::probe_cache

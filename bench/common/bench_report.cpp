#include "common/bench_report.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera {
namespace bench {

double time_median_ms(const std::function<void()>& fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

void BenchReport::print(std::ostream& os) const {
  os << program_ << "\n";
  for (const auto& [k, v] : notes_) os << "  " << k << ": " << v << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-26s %-18s %10s %12s %-8s %12s %7s  %s\n", "op", "shape", "median ms", "value",
                "unit", "baseline", "ratio", "baseline is");
  os << line;
  for (const Row& r : rows_) {
    std::snprintf(line, sizeof line, "%-26s %-18s %10.3f %12.2f %-8s %12.2f %7.3f  %s\n", r.name.c_str(),
                  r.shape.c_str(), r.ms, r.value, r.unit.c_str(), r.baseline, r.ratio(), r.baseline_name.c_str());
    os << line;
  }
}

void BenchReport::write_json(const std::string& path) const {
  nlohmann::json j;
  j["program"] = program_;
  for (const auto& [k, v] : notes_) j["notes"][k] = v;
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows_)
    j["rows"].push_back({{"name", r.name}, {"shape", r.shape}, {"median_ms", r.ms}, {"value", r.value},
                         {"unit", r.unit}, {"baseline", r.baseline}, {"baseline_name", r.baseline_name},
                         {"ratio", r.ratio()}});
  std::ofstream f(path);
  TS_CHECK(f.good(), IOError, "cannot open '" << path << "' for writing");
  f << std::setw(2) << j << "\n";
  f.close();
  TS_CHECK(f.good(), IOError, "failed writing '" << path << "'");
}

}  // namespace bench
}  // namespace tessera

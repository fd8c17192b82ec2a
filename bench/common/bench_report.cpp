#include "common/bench_report.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera {
namespace bench {

int parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    const std::string path = argc > 0 ? argv[0] : "bench";
    std::cerr << path.substr(path.find_last_of('/') + 1) << ": " << e.what() << "\n";
    return 2;
  }
  return -1;
}

namespace {
double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}
double elapsed_ms(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

double time_median_ms(const std::function<void()>& fn, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < std::max(1, repeats); ++i) ms.push_back(elapsed_ms(fn));
  return median(ms);
}


std::pair<double, double> time_pair_median_ms(const std::function<void()>& a, const std::function<void()>& b,
                                              int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) a(), b();
  std::vector<double> ta, tb;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    ta.push_back(elapsed_ms(a));
    tb.push_back(elapsed_ms(b));
  }
  return {median(ta), median(tb)};
}

std::vector<double> time_interleaved_median_ms(const std::vector<std::function<void()>>& fns, int warmup,
                                               int repeats) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& fn : fns) fn();
  std::vector<std::vector<double>> ms(fns.size());
  for (int i = 0; i < std::max(1, repeats); ++i)
    for (size_t k = 0; k < fns.size(); ++k) ms[k].push_back(elapsed_ms(fns[k]));
  std::vector<double> out;
  for (auto& v : ms) out.push_back(median(std::move(v)));
  return out;
}

void BenchReport::print(std::ostream& os) const {
  os << program_ << "\n";
  for (const auto& [k, v] : notes_) os << "  " << k << ": " << v << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-26s %-18s %10s %12s %-8s %12s %7s  %s\n", "op", "shape", "median ms", "value",
                "unit", "baseline", "ratio", "baseline is");
  os << line;
  for (const Row& r : rows_) {
    char ms[32] = "-";
    if (r.ms > 0) std::snprintf(ms, sizeof ms, "%.3f", r.ms);
    std::snprintf(line, sizeof line, "%-26s %-18s %10s %12.2f %-8s %12.2f %7.3f  %s\n", r.name.c_str(),
                  r.shape.c_str(), ms, r.value, r.unit.c_str(), r.baseline, r.ratio(), r.baseline_name.c_str());
    os << line;
  }
}

void BenchReport::write_json(const std::string& path, const nlohmann::json& extra) const {
  nlohmann::json j;
  j["program"] = program_;
  for (const auto& [k, v] : notes_) j["notes"][k] = v;
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows_)
    j["rows"].push_back({{"name", r.name}, {"shape", r.shape},
                         {"median_ms", r.ms > 0 ? nlohmann::json(r.ms) : nlohmann::json(nullptr)}, {"value", r.value},
                         {"unit", r.unit}, {"baseline", r.baseline}, {"baseline_name", r.baseline_name},
                         {"ratio", r.ratio()}});
  for (const auto& [k, v] : extra.items()) j[k] = v;
  std::ofstream f(path);
  TS_CHECK(f.good(), IOError, "cannot open '" << path << "' for writing");
  f << std::setw(2) << j << "\n";
  f.close();
  TS_CHECK(f.good(), IOError, "failed writing '" << path << "'");
}

}  // namespace bench
}  // namespace tessera

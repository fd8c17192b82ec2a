// Benchmark support: median timing with warm-up, a printed table, and a JSON file.
//
//   BenchReport report("ops_cpu");
//   double ms = time_median_ms([&] { matmul(a, b); }, /*warmup=*/2, /*repeats=*/10);
//   report.add({"matmul", "2048x1024x1024", ms, gflops, "GFLOP/s", eigen_gflops, "Eigen direct"});
//   report.print(std::cout);
//   report.write_json(path);   // when --json FILE was given
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace tessera {
namespace bench {

/// Parses the flags: -1 to go on; else the exit code — 0 after --help (printed), 2 after a bad
/// flag or value, reported as one line "PROGRAM: what is wrong" on stderr.
int parse_flags(CLI::App& app, int argc, char** argv);

/// Median wall time in milliseconds of `fn` over `repeats` runs after `warmup` runs.
double time_median_ms(const std::function<void()>& fn, int warmup, int repeats);

/// Medians of `a` and `b` timed in alternation (a, b, a, b, ...), so drift in machine speed
/// (other load, clocks) affects both alike: for ratios of two ways of doing the same work.
std::pair<double, double> time_pair_median_ms(const std::function<void()>& a, const std::function<void()>& b,
                                              int warmup, int repeats);

/// The same for any number of ways: medians of fns[0], fns[1], ... timed in turn, each round
/// running every function once (after `warmup` untimed rounds).
std::vector<double> time_interleaved_median_ms(const std::vector<std::function<void()>>& fns, int warmup,
                                               int repeats);

/// One measured figure and the baseline it is compared with (measured in the same run).
struct Row {
  std::string name;      ///< what ran, e.g. "matmul f32"
  std::string shape;     ///< problem size, e.g. "2048x1024x1024"
  double ms = 0;         ///< median time of one run (0: not a timing, e.g. a memory figure; printed as -)
  double value = 0;      ///< the figure, in `unit`
  std::string unit;      ///< "GFLOP/s", "GB/s", ...
  double baseline = 0;   ///< the baseline's figure in the same unit
  std::string baseline_name;
  double ratio() const { return baseline > 0 ? value / baseline : 0; }
};

class BenchReport {
 public:
  explicit BenchReport(std::string program) : program_(std::move(program)) {}
  void add(Row row) { rows_.push_back(std::move(row)); }
  /// Free-form facts about the run (threads, build type) printed above the table and stored in JSON.
  void note(const std::string& key, const std::string& value) { notes_.push_back({key, value}); }
  void print(std::ostream& os) const;
  /// Writes {"program", "notes", "rows": [...]} and the keys of `extra` (a JSON object: a
  /// program's own structured figures); throws tessera::IOError when the file cannot be written.
  void write_json(const std::string& path, const nlohmann::json& extra = nlohmann::json::object()) const;

 private:
  std::string program_;
  std::vector<std::pair<std::string, std::string>> notes_;
  std::vector<Row> rows_;
};

}  // namespace bench
}  // namespace tessera

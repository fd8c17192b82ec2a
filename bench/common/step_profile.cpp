#include "common/step_profile.h"

#include <algorithm>

namespace tessera {
namespace bench {

void add_profile(BenchReport& report, const std::string& label, const std::string& shape,
                 const std::vector<OpTime>& prof, double step_ms, int top) {
  double sum = 0;
  for (const OpTime& t : prof) sum += t.ms;
  auto share = [&](double ms) { return sum > 0 ? ms / sum : 0.0; };
  const size_t shown = std::min(prof.size(), static_cast<size_t>(std::max(0, top)));
  for (size_t i = 0; i < shown; ++i) {
    const OpTime& t = prof[i];
    report.add({label + ": " + t.op + " (" + std::to_string(t.nodes) + (t.nodes == 1 ? " node)" : " nodes)"), shape,
                t.ms, share(t.ms), "share", 1.0, "the profiled sum"});
  }
  double rest = 0;
  int rest_nodes = 0;
  for (size_t i = shown; i < prof.size(); ++i) rest += prof[i].ms, rest_nodes += prof[i].nodes;
  if (shown < prof.size())
    report.add({label + ": (other ops, " + std::to_string(rest_nodes) + " nodes)", shape, rest, share(rest), "share",
                1.0, "the profiled sum"});
  report.add({label + ": (sum)", shape, sum, sum, "ms", step_ms, "the step replayed"});
}

std::vector<OpTime> profile_printing_shapes(CompiledStep& step, const std::map<std::string, Tensor>& inputs,
                                            const std::string& label, const std::string& shape, std::ostream& out,
                                            size_t rows) {
  std::vector<NodeTime> nodes;
  std::vector<OpTime> prof = step.profile(inputs, &nodes);
  out << label << " " << shape << ", by op and shapes:\n" << format_profile_by_signature(nodes, rows) << std::flush;
  return prof;
}

}  // namespace bench
}  // namespace tessera

// A compiled step's time by op (CompiledStep::profile) as benchmark rows: where a step's time
// goes, in the same run as the step's timing.
//
//   std::vector<OpTime> prof = step.profile(inputs);      // after warm-up steps
//   bench::add_profile(report, "profile graph", "64x256", prof, graph_ms);
//   // or, with the costliest (op, shapes) groups printed as well:
//   prof = bench::profile_printing_shapes(step, inputs, "profile graph", "64x256", std::cout);
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "common/bench_report.h"
#include "core/graph/compile.h"

namespace tessera {
namespace bench {

/// Rows "LABEL: OP (n nodes)" for the `top` ops that took the most time (then "(other ops)" for
/// the rest, and "(sum)"), each in ms, as a share of the profiled sum (unit "share"), against
/// `step_ms`, the step as it is replayed, measured in the same run (the "(sum)" row's ratio:
/// the profiled run's sum / the replayed step, above 1 by the launch gaps and the events).
void add_profile(BenchReport& report, const std::string& label, const std::string& shape,
                 const std::vector<OpTime>& prof, double step_ms, int top = 12);

/// step.profile(inputs) (for add_profile), with its nodes grouped by op and shapes
/// (format_profile_by_signature, the `rows` costliest) printed to `out` under "LABEL SHAPE, by op
/// and shapes:", so that a row such as "cast (18 nodes)" can be read as the tensors it casts.
std::vector<OpTime> profile_printing_shapes(CompiledStep& step, const std::map<std::string, Tensor>& inputs,
                                            const std::string& label, const std::string& shape, std::ostream& out,
                                            size_t rows = 20);

}  // namespace bench
}  // namespace tessera

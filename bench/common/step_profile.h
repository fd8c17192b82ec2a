// A compiled step's time by op (CompiledStep::profile) as benchmark rows: where a step's time
// goes, in the same run as the step's timing.
//
//   std::vector<OpTime> prof = step.profile(inputs);      // after warm-up steps
//   bench::add_profile(report, "profile graph", "64x256", prof, graph_ms);
#pragma once

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

}  // namespace bench
}  // namespace tessera

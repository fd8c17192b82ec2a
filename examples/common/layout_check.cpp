#include "examples/common/layout_check.h"

#include "core/error.h"

namespace tessera {
namespace examples {
namespace {

// The lines joined by "; ", then the fix: one line however many groups degenerate.
std::string one_line(const std::vector<std::string>& lines, const std::string& fix) {
  std::string s;
  for (const std::string& l : lines) s += (s.empty() ? "" : "; ") + l;
  return fix.empty() ? s : s + "; " + fix;
}

}  // namespace

void check_layouts(const std::vector<models::LayoutInfo>& report, const std::string& program,
                   const LayoutFixes& fixes, std::ostream& out, std::ostream& err) {
  std::vector<models::LayoutInfo> attention, block;
  for (const models::LayoutInfo& e : report) (e.is_attention() ? attention : block).push_back(e);
  const std::vector<std::string> dense_attention = models::degenerate_layouts(attention);
  TS_CHECK(dense_attention.empty(), ValueError, one_line(dense_attention, fixes.attention));
  const std::vector<std::string> dense_weights = models::degenerate_layouts(block);
  if (!dense_weights.empty()) err << program << ": warning: " << one_line(dense_weights, fixes.weights) << "\n";
  for (const std::string& l : models::summarize_layouts(report)) out << program << ": layout " << l << "\n";
}

}  // namespace examples
}  // namespace tessera

// Loss curves as a standalone SVG line chart (opens in any browser; no plotting library).
//
//   logging::PlotSeries train{"train loss", {{0, 4.2}, {100, 2.9}, {200, 2.1}}};
//   logging::PlotSeries val{"val loss", {{0, 4.3}, {200, 2.4}}};
//   logging::write_loss_svg("runs/tiny/loss.svg", {train, val});
//
// The chart has a title, x (step) and y (value) axes with "nice" ticks (1, 2 or 5 x 10^k) and
// grid lines, one polyline per series in its own colour, and a legend. Non-finite values
// (NaN, inf: a diverged run) are left out of the curve. Element hooks for tools and tests:
// the plot area is <rect class="plot-box" .../>, each curve <polyline class="series" ...>.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace logging {

/// One named curve: (step, value) points, drawn in the given order.
struct PlotSeries {
  std::string name;
  std::vector<std::pair<int64_t, double>> points;
};

/// Chart text and size (pixels).
struct PlotOptions {
  std::string title = "loss";
  std::string x_label = "step";
  std::string y_label = "loss";
  int width = 800;
  int height = 480;
};

/// The SVG document of the chart (see above). ValueError when width/height are below 200.
std::string render_loss_svg(const std::vector<PlotSeries>& series, const PlotOptions& options = {});

/// Writes render_loss_svg(...) to `path` atomically (temporary file + rename); IOError naming
/// `path` on failure.
void write_loss_svg(const std::string& path, const std::vector<PlotSeries>& series,
                    const PlotOptions& options = {});

}  // namespace logging
}  // namespace tessera

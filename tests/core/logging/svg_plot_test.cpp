// write_loss_svg: a well-formed standalone SVG with both curves, labels and a legend, every point
// inside the plot box, written atomically.
#include "core/logging/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "../io/io_test_util.h"

namespace tessera {
namespace {

using testing::TempDir;

double attr(const std::string& element, const std::string& name) {
  std::smatch m;
  const std::regex re(" " + name + "=\"([-0-9.e]+)\"");
  if (!std::regex_search(element, m, re)) {
    ADD_FAILURE() << "no " << name << " in " << element;
    return NAN;
  }
  return std::stod(m[1]);
}

// Every element that opens must close (a tag-balance check, enough for the generated subset).
bool balanced(const std::string& svg) {
  std::vector<std::string> stack;
  const std::regex tag("<(/?)([a-z]+)[^>]*?(/?)>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    if (m[3] == "/") continue;  // self-closing
    if (m[1] == "/") {
      if (stack.empty() || stack.back() != m[2]) return false;
      stack.pop_back();
    } else {
      stack.push_back(m[2]);
    }
  }
  return stack.empty();
}

std::vector<logging::PlotSeries> sample() {
  logging::PlotSeries train{"train loss", {}}, val{"val <loss> & co", {}};
  for (int s = 0; s <= 300; s += 10) train.points.push_back({s, 4.0 * std::exp(-s / 80.0) + 0.3});
  for (int s = 0; s <= 300; s += 50) val.points.push_back({s, 4.1 * std::exp(-s / 90.0) + 0.45});
  train.points.push_back({310, NAN});  // a diverged point is left out
  return {train, val};
}

TEST(SvgPlot, WellFormedWithCurvesLabelsLegend) {
  const std::string svg = logging::render_loss_svg(sample(), {});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_TRUE(balanced(svg));
  EXPECT_NE(svg.find(">train loss</text>"), std::string::npos);           // legend entries
  EXPECT_NE(svg.find(">val &lt;loss&gt; &amp; co</text>"), std::string::npos);  // escaped
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);                 // axis labels, title
  EXPECT_NE(svg.find(">loss</text>"), std::string::npos);
  EXPECT_NE(svg.find(">300</text>"), std::string::npos);                  // an x tick at the last step
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(SvgPlot, PointsInsidePlotBox) {
  const auto series = sample();
  const std::string svg = logging::render_loss_svg(series, {});
  std::smatch box_m;
  ASSERT_TRUE(std::regex_search(svg, box_m, std::regex("<rect class=\"plot-box\"[^>]*>")));
  const std::string box = box_m[0];
  const double x0 = attr(box, "x"), y0 = attr(box, "y"), w = attr(box, "width"), h = attr(box, "height");
  const std::regex poly("<polyline class=\"series\"[^>]*points=\"([^\"]*)\"");
  size_t curves = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), poly); it != std::sregex_iterator(); ++it, ++curves) {
    ASSERT_LT(curves, series.size());
    std::istringstream pts((*it)[1].str());
    std::vector<std::pair<double, double>> xy;
    double x, y;
    char comma;
    while (pts >> x >> comma >> y) xy.push_back({x, y});
    const size_t finite = curves == 0 ? series[0].points.size() - 1 : series[1].points.size();
    ASSERT_EQ(xy.size(), finite);
    for (const auto& p : xy) {
      EXPECT_GE(p.first, x0 - 0.01);
      EXPECT_LE(p.first, x0 + w + 0.01);
      EXPECT_GE(p.second, y0 - 0.01);
      EXPECT_LE(p.second, y0 + h + 0.01);
    }
    // Steps increase left to right; the decaying loss goes down the chart (SVG y grows downwards).
    EXPECT_LT(xy.front().first, xy.back().first);
    EXPECT_LT(xy.front().second, xy.back().second);
  }
  EXPECT_EQ(curves, 2u);
}

TEST(SvgPlot, DegenerateInputs) {
  // No series, one flat point, an all-NaN series: still a valid chart, no NaN coordinates.
  for (const auto& s : std::vector<std::vector<logging::PlotSeries>>{
           {}, {{"one", {{5, 2.0}}}}, {{"diverged", {{0, NAN}, {1, INFINITY}}}}}) {
    const std::string svg = logging::render_loss_svg(s, {});
    EXPECT_TRUE(balanced(svg));
    EXPECT_EQ(svg.find("nan"), std::string::npos);
    EXPECT_EQ(svg.find("inf"), std::string::npos);
  }
  EXPECT_NE(logging::render_loss_svg({{"one", {{5, 2.0}}}}, {}).find("<circle"), std::string::npos);
  logging::PlotOptions tiny;
  tiny.width = 50;
  EXPECT_THROW(logging::render_loss_svg({}, tiny), ValueError);
}

TEST(SvgPlot, WritesAtomically) {
  TempDir dir;
  logging::write_loss_svg(dir.file("loss.svg"), sample());
  EXPECT_EQ(testing::read_bytes(dir.file("loss.svg")), logging::render_loss_svg(sample()));
  EXPECT_EQ(dir.files(), std::vector<std::string>{"loss.svg"});  // no temporary left behind
  EXPECT_THROW(logging::write_loss_svg(dir.file("missing/loss.svg"), sample()), IOError);
}

}  // namespace
}  // namespace tessera

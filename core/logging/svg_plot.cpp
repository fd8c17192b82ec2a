#include "core/logging/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/io/atomic_file.h"

namespace tessera {
namespace logging {

namespace {

constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
constexpr double kLeft = 76, kRight = 24, kTop = 44, kBottom = 58;  // margins around the plot box
constexpr int kTargetTicks = 6;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Tick label: shortest %g form (the tick values are already multiples of the tick step).
std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// 1, 2 or 5 x 10^k closest above span / kTargetTicks.
double nice_step(double span) {
  const double raw = span / kTargetTicks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

// An axis: data range [lo, hi] widened to whole tick steps.
struct Axis {
  double lo, hi, step;
  Axis(double min, double max, double min_step) {
    if (!(max > min)) {  // one distinct value (or none): a unit-ish window around it
      const double pad = min == 0 ? 1 : std::abs(min) * 0.1;
      min -= pad;
      max += pad;
    }
    step = std::max(nice_step(max - min), min_step);
    lo = std::floor(min / step) * step;
    hi = std::ceil(max / step) * step;
  }
  // Tick values lo, lo + step, ..., hi (index-based, so no rounding drift; -0 shown as 0).
  std::vector<double> ticks() const {
    std::vector<double> t;
    const long n = std::lround((hi - lo) / step);
    for (long i = 0; i <= n; ++i) {
      const double v = lo + static_cast<double>(i) * step;
      t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    }
    return t;
  }
};

bool finite_point(const std::pair<int64_t, double>& p) { return std::isfinite(p.second); }

}  // namespace

std::string render_loss_svg(const std::vector<PlotSeries>& series, const PlotOptions& opt) {
  TS_CHECK(opt.width >= 200 && opt.height >= 200, ValueError,
           "render_loss_svg: chart size " << opt.width << "x" << opt.height << " is below 200x200");
  // Data ranges over the finite points of every series.
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const PlotSeries& s : series)
    for (const auto& p : s.points)
      if (finite_point(p)) {
        xmin = std::min(xmin, double(p.first));
        xmax = std::max(xmax, double(p.first));
        ymin = std::min(ymin, p.second);
        ymax = std::max(ymax, p.second);
      }
  if (!(xmax >= xmin)) xmin = xmax = ymin = ymax = 0;  // nothing to draw
  const Axis ax(xmin, xmax, 1.0), ay(ymin, ymax, 0.0);

  // Plot box (x0, y0, w, h) in pixels; data -> pixels maps linearly, y grows upwards.
  const double x0 = kLeft, y0 = kTop, w = opt.width - kLeft - kRight, h = opt.height - kTop - kBottom;
  auto px = [&](double x) { return x0 + (x - ax.lo) / (ax.hi - ax.lo) * w; };
  auto py = [&](double y) { return y0 + h - (y - ay.lo) / (ay.hi - ay.lo) * h; };

  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(opt.width) + "\" height=\"" +
       std::to_string(opt.height) + "\" viewBox=\"0 0 " + std::to_string(opt.width) + " " +
       std::to_string(opt.height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(opt.width / 2.0) + "\" y=\"26\" text-anchor=\"middle\" font-size=\"16\">" +
       escape(opt.title) + "</text>\n";
  o += "<rect class=\"plot-box\" x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(w) + "\" height=\"" +
       num(h) + "\" fill=\"none\" stroke=\"black\"/>\n";

  // Grid lines, tick marks and tick labels.
  for (double t : ax.ticks()) {
    const std::string x = num(px(t));
    o += "<line x1=\"" + x + "\" y1=\"" + num(y0) + "\" x2=\"" + x + "\" y2=\"" + num(y0 + h) +
         "\" stroke=\"#e0e0e0\"/>\n";
    o += "<line x1=\"" + x + "\" y1=\"" + num(y0 + h) + "\" x2=\"" + x + "\" y2=\"" + num(y0 + h + 5) +
         "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + x + "\" y=\"" + num(y0 + h + 19) + "\" text-anchor=\"middle\">" + label(t) + "</text>\n";
  }
  for (double t : ay.ticks()) {
    const std::string y = num(py(t));
    o += "<line x1=\"" + num(x0) + "\" y1=\"" + y + "\" x2=\"" + num(x0 + w) + "\" y2=\"" + y +
         "\" stroke=\"#e0e0e0\"/>\n";
    o += "<line x1=\"" + num(x0 - 5) + "\" y1=\"" + y + "\" x2=\"" + num(x0) + "\" y2=\"" + y +
         "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + num(x0 - 8) + "\" y=\"" + num(py(t) + 4) + "\" text-anchor=\"end\">" + label(t) +
         "</text>\n";
  }
  o += "<text x=\"" + num(x0 + w / 2) + "\" y=\"" + num(opt.height - 12.0) + "\" text-anchor=\"middle\">" +
       escape(opt.x_label) + "</text>\n";
  const std::string ylx = num(18), yly = num(y0 + h / 2);
  o += "<text x=\"" + ylx + "\" y=\"" + yly + "\" text-anchor=\"middle\" transform=\"rotate(-90 " + ylx + " " +
       yly + ")\">" + escape(opt.y_label) + "</text>\n";

  // Curves (a lone point gets a dot, since a one-point polyline draws nothing).
  const size_t ncolors = sizeof kColors / sizeof kColors[0];
  for (size_t i = 0; i < series.size(); ++i) {
    const std::string color = kColors[i % ncolors];
    std::string pts;
    size_t n = 0;
    for (const auto& p : series[i].points) {
      if (!finite_point(p)) continue;
      pts += (n++ ? " " : "") + num(px(double(p.first))) + "," + num(py(p.second));
    }
    o += "<polyline class=\"series\" data-name=\"" + escape(series[i].name) + "\" fill=\"none\" stroke=\"" +
         color + "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
    if (n == 1) o += "<circle cx=\"" + pts.substr(0, pts.find(',')) + "\" cy=\"" + pts.substr(pts.find(',') + 1) +
                     "\" r=\"3\" fill=\"" + color + "\"/>\n";
  }

  // Legend in the plot box's top-right corner: a coloured stroke and the name per series.
  if (!series.empty()) {
    size_t longest = 0;
    for (const PlotSeries& s : series) longest = std::max(longest, s.name.size());
    const double lw = 40 + 7.0 * static_cast<double>(longest), lh = 8 + 18.0 * static_cast<double>(series.size());
    const double lx = x0 + w - lw - 8, ly = y0 + 8;
    o += "<rect x=\"" + num(lx) + "\" y=\"" + num(ly) + "\" width=\"" + num(lw) + "\" height=\"" + num(lh) +
         "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#999999\"/>\n";
    for (size_t i = 0; i < series.size(); ++i) {
      const double cy = ly + 13 + 18.0 * static_cast<double>(i);
      o += "<line x1=\"" + num(lx + 6) + "\" y1=\"" + num(cy) + "\" x2=\"" + num(lx + 28) + "\" y2=\"" + num(cy) +
           "\" stroke=\"" + kColors[i % ncolors] + "\" stroke-width=\"2\"/>\n";
      o += "<text x=\"" + num(lx + 34) + "\" y=\"" + num(cy + 4) + "\">" + escape(series[i].name) + "</text>\n";
    }
  }
  o += "</svg>\n";
  return o;
}

void write_loss_svg(const std::string& path, const std::vector<PlotSeries>& series, const PlotOptions& options) {
  const std::string svg = render_loss_svg(series, options);
  io::atomic_write(path, [&](const std::string& tmp) { io::write_file(tmp, svg.data(), svg.size()); });
}

}  // namespace logging
}  // namespace tessera

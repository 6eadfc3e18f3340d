// Dependency-free SVG line and grouped-bar charts (include/iser/svg.h).
#include "iser/svg.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "iser/error.h"

namespace iser::svg {
namespace {

constexpr double kMarginLeft = 72;
constexpr double kMarginTop = 44;
constexpr double kMarginBottom = 56;
constexpr double kLegendGap = 16;
constexpr double kCharWidth = 6.6;  // average glyph width of 12-px sans-serif, for layout only
constexpr int kMinSize = 120;
constexpr int kMaxSize = 20000;

struct Range {
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;
};

// The data range of `values`, widened to nice ticks unless the axis fixes it.
Range resolve_range(const Axis& axis, const std::vector<double>& values, std::string_view what) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) lo = hi = 0;  // no finite data: an empty [0, 1] frame
  if (axis.include_zero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  if (axis.min) lo = *axis.min;
  if (axis.max) hi = *axis.max;
  ISER_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi,
             "svg: invalid {} axis range [{}, {}]", what, lo, hi);
  if (hi == lo) hi = lo + (lo == 0 ? 1.0 : std::abs(lo) * 0.1);
  Range range{lo, hi, axis.ticks};
  if (range.ticks.empty()) {
    range.ticks = nice_ticks(lo, hi);
    if (!axis.min) range.lo = std::min(range.lo, range.ticks.front());
    if (!axis.max) range.hi = std::max(range.hi, range.ticks.back());
  }
  std::erase_if(range.ticks, [&](double t) {
    const double eps = (range.hi - range.lo) * 1e-9;
    return t < range.lo - eps || t > range.hi + eps;
  });
  return range;
}

struct LegendEntry {
  std::string name;
  std::string color;
  bool is_ref_line = false;  // drawn as a dashed line swatch
  bool is_line = false;      // a line series: a line swatch with its dash and marker
  std::string dash;
  Marker marker = Marker::kNone;
};

Marker resolve_marker(const LineSeries& series, size_t idx) {
  if (!series.markers) return Marker::kNone;
  if (series.marker != Marker::kAuto) return series.marker;
  static constexpr Marker kCycle[] = {Marker::kCircle,  Marker::kSquare,       Marker::kTriangle,
                                      Marker::kDiamond, Marker::kTriangleDown, Marker::kPlus};
  return kCycle[idx % std::size(kCycle)];
}

std::string resolve_dash(const LineSeries& series) {
  if (!series.dash.empty()) return series.dash;
  return series.dashed ? "7 4" : "";
}

// One marker centred on (x, y), about 7 px across.
std::string marker_svg(Marker marker, double x, double y, const std::string& color) {
  switch (marker) {
    case Marker::kCircle:
      return fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n", x, y,
                         color);
    case Marker::kSquare:
      return fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"6.5\" height=\"6.5\" fill=\"{}\"/>\n", x - 3.25,
          y - 3.25, color);
    case Marker::kTriangle:
      return fmt::format(
          "<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" fill=\"{}\"/>\n", x,
          y - 4.5, x - 4, y + 3, x + 4, y + 3, color);
    case Marker::kTriangleDown:
      return fmt::format(
          "<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" fill=\"{}\"/>\n", x,
          y + 4.5, x - 4, y - 3, x + 4, y - 3, color);
    case Marker::kDiamond:
      return fmt::format(
          "<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" "
          "fill=\"{}\"/>\n",
          x, y - 4.5, x + 4.5, y, x, y + 4.5, x - 4.5, y, color);
    case Marker::kPlus:
      return fmt::format(
          "<path d=\"M{:.1f},{:.1f}h9M{:.1f},{:.1f}v9\" stroke=\"{}\" stroke-width=\"2\"/>\n",
          x - 4.5, y, x, y - 4.5, color);
    case Marker::kAuto:
    case Marker::kNone:
      break;
  }
  return {};
}

// The last finite y of a series (NaN when none): where its line ends on the right.
double line_end(const LineSeries& series) {
  for (size_t i = series.y.size(); i-- > 0;) {
    if (std::isfinite(series.y[i]) && std::isfinite(series.x[i])) return series.y[i];
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double legend_width(const std::vector<LegendEntry>& legend) {
  size_t longest = 0;
  for (const LegendEntry& entry : legend) longest = std::max(longest, entry.name.size());
  return legend.empty() ? 0 : 32 + kCharWidth * static_cast<double>(longest) + kLegendGap;
}

std::string tick_text(const Axis& axis, double value) {
  return axis.format ? axis.format(value) : format_number(value);
}

// Shared frame of both chart kinds: canvas, title, plot box, y grid and labels, reference
// lines and legend (series first, then labelled reference lines).
class Canvas {
 public:
  Canvas(int width, int height, const std::string& title, const Axis& y_axis, Range y_range,
         std::vector<LegendEntry> legend, const std::vector<RefLine>& ref_lines,
         int x_label_lines = 1, double min_plot_width = 0)
      : height_(height), y_axis_(y_axis), y_(std::move(y_range)) {
    ISER_CHECK(width >= kMinSize && width <= kMaxSize && height >= kMinSize && height <= kMaxSize,
               "svg: invalid chart size {}x{}: need {}..{} pixels per side", width, height,
               kMinSize, kMaxSize);
    for (const RefLine& line : ref_lines) {
      if (!line.label.empty()) {
        legend.push_back({line.label, line.color, true, false, "", Marker::kNone});
      }
    }
    // The canvas widens (never narrows) to give the plot at least min_plot_width.
    width = std::max(width, static_cast<int>(std::ceil(kMarginLeft + min_plot_width + 16 +
                                                       legend_width(legend))));
    width_ = width;
    x0_ = kMarginLeft;
    x1_ = std::max(x0_ + 40, width - 16 - legend_width(legend));
    y0_ = kMarginTop;
    y1_ = std::max(y0_ + 40, height - kMarginBottom - 14.0 * (x_label_lines - 1));
    out_ = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
        "viewBox=\"0 0 {0} {1}\" font-family=\"Helvetica, Arial, sans-serif\" "
        "font-size=\"12\">\n"
        "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" "
        "stroke=\"#ffffff\" stroke-width=\"2.5\"/></pattern></defs>\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n",
        width, height);
    if (!title.empty()) {
      out_ += fmt::format(
          "<text x=\"{:.1f}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" "
          "font-weight=\"bold\">{}</text>\n",
          width / 2.0, escape_xml(title));
    }
    draw_y_axis();
    draw_legend(legend, x1_ + kLegendGap);
  }

  double y_px(double v) const { return y1_ - (v - y_.lo) / (y_.hi - y_.lo) * (y1_ - y0_); }
  double left() const { return x0_; }
  double right() const { return x1_; }
  double bottom() const { return y1_; }
  double y_lo() const { return y_.lo; }
  std::string& out() { return out_; }

  void draw_ref_lines(const std::vector<RefLine>& lines) {
    for (const RefLine& line : lines) {
      if (!std::isfinite(line.value) || line.value < y_.lo || line.value > y_.hi) continue;
      const double y = y_px(line.value);
      out_ += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
          "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
          x0_, y, x1_, y, escape_xml(line.color));
    }
  }

  void draw_x_label(const std::string& label) {
    if (label.empty()) return;
    out_ += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                        (x0_ + x1_) / 2, height_ - 10, escape_xml(label));
  }

  std::string finish() {
    out_ += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
        "stroke=\"#333333\"/>\n</svg>\n",
        x0_, y0_, x1_ - x0_, y1_ - y0_);
    return std::move(out_);
  }

 private:
  void draw_y_axis() {
    for (const double t : y_.ticks) {
      const double y = y_px(t);
      out_ += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e3e3e3\"/>\n"
          "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
          x0_, y, x1_, y, x0_ - 6, y + 4, escape_xml(tick_text(y_axis_, t)));
    }
    if (!y_axis_.label.empty()) {
      out_ += fmt::format(
          "<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}"
          "</text>\n",
          (y0_ + y1_) / 2, escape_xml(y_axis_.label));
    }
  }

  void draw_legend(const std::vector<LegendEntry>& legend, double x) {
    double y = y0_ + 6;
    for (const LegendEntry& entry : legend) {
      if (entry.is_ref_line) {
        out_ += fmt::format(
            "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
            "stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\n",
            x, y + 5, x + 16, y + 5, escape_xml(entry.color));
      } else if (entry.is_line) {
        const std::string color = escape_xml(entry.color);
        out_ += fmt::format(
            "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
            "stroke-width=\"2\"{}/>\n",
            x - 4, y + 5, x + 20, y + 5, color,
            entry.dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", entry.dash));
        out_ += marker_svg(entry.marker, x + 8, y + 5, color);
      } else {
        out_ += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"16\" height=\"10\" fill=\"{}\"/>\n", x, y,
            escape_xml(entry.color));
      }
      out_ += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", x + 22, y + 9,
                          escape_xml(entry.name));
      y += 20;
    }
  }

  int width_;
  int height_;
  const Axis& y_axis_;
  Range y_;
  double x0_ = 0, x1_ = 0, y0_ = 0, y1_ = 0;
  std::string out_;
};

std::string series_color(const std::string& color, size_t idx) {
  return color.empty() ? std::string(palette_color(idx)) : color;
}

}  // namespace

std::string escape_xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string_view palette_color(size_t idx) {
  // Okabe-Ito, reordered so that the first series are the most distinct.
  static constexpr std::string_view kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                  "#E69F00", "#56B4E9", "#000000", "#F0E442"};
  return kPalette[idx % std::size(kPalette)];
}

std::vector<double> nice_ticks(double lo, double hi, int target_count) {
  ISER_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && target_count >= 1,
             "svg: invalid tick range [{}, {}] with {} ticks", lo, hi, target_count);
  if (hi == lo) hi = lo + 1;
  const double raw = (hi - lo) / target_count;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude * 10;
  for (const double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  std::vector<double> ticks;
  const double first_idx = std::floor(lo / step + 1e-9);
  for (double idx = first_idx;; idx += 1) {
    // Multiples of the step, rounded to 12 significant digits so that 3 x 0.2 prints as 0.6.
    const double t = std::stod(fmt::format("{:.12g}", idx * step));
    ticks.push_back(t == 0 ? 0.0 : t);
    if (t >= hi - step * 1e-9) break;
  }
  return ticks;
}

std::string format_number(double value) {
  if (!std::isfinite(value)) return "";
  const double mag = std::abs(value);
  if (mag >= 1e6 && std::fmod(value, 1e5) == 0) return fmt::format("{:g}M", value / 1e6);
  if (mag >= 1e4 && std::fmod(value, 100) == 0) return fmt::format("{:g}k", value / 1e3);
  return fmt::format("{:.6g}", value);
}

std::string render(const LineChart& chart) {
  ISER_CHECK(!chart.series.empty(), "svg: line chart '{}' has no series", chart.title);
  std::vector<double> xs;
  std::vector<double> ys;
  std::vector<LegendEntry> legend;
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const LineSeries& series = chart.series[s];
    ISER_CHECK(series.x.size() == series.y.size(),
               "svg: series '{}' has {} x values but {} y values", series.name, series.x.size(),
               series.y.size());
    ISER_CHECK(series.marker_every >= 1, "svg: series '{}' has marker_every = {} (need >= 1)",
               series.name, series.marker_every);
    xs.insert(xs.end(), series.x.begin(), series.x.end());
    ys.insert(ys.end(), series.y.begin(), series.y.end());
  }
  std::vector<size_t> order(chart.series.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  if (chart.legend_by_line_end) {
    // Top line first; a series with no finite point goes last.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const double ya = line_end(chart.series[a]);
      const double yb = line_end(chart.series[b]);
      if (!std::isfinite(ya) || !std::isfinite(yb)) return std::isfinite(ya) && !std::isfinite(yb);
      return ya > yb;
    });
  }
  for (const size_t s : order) {
    const LineSeries& series = chart.series[s];
    if (series.name.empty()) continue;
    legend.push_back({series.name, series_color(series.color, s), false, true, resolve_dash(series),
                      resolve_marker(series, s)});
  }
  for (const RefLine& line : chart.ref_lines) ys.push_back(line.value);
  const Range x_range = resolve_range(chart.x_axis, xs, "x");
  Canvas canvas(chart.width, chart.height, chart.title, chart.y_axis,
                resolve_range(chart.y_axis, ys, "y"), legend, chart.ref_lines);
  std::string& out = canvas.out();
  const auto x_px = [&](double v) {
    return canvas.left() +
           (v - x_range.lo) / (x_range.hi - x_range.lo) * (canvas.right() - canvas.left());
  };
  for (const double t : x_range.ticks) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333333\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        x_px(t), canvas.bottom(), canvas.bottom() + 5, canvas.bottom() + 19,
        escape_xml(tick_text(chart.x_axis, t)));
  }
  canvas.draw_x_label(chart.x_axis.label);
  canvas.draw_ref_lines(chart.ref_lines);
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const LineSeries& series = chart.series[s];
    const std::string color = escape_xml(series_color(series.color, s));
    const std::string dash_array = resolve_dash(series);
    const std::string dash =
        dash_array.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", dash_array);
    std::string points;
    const auto flush = [&] {
      if (points.empty()) return;
      out += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n", color,
          dash, points);
      points.clear();
    };
    for (size_t i = 0; i < series.x.size(); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) {
        flush();  // a gap in the data breaks the line
        continue;
      }
      points += fmt::format("{}{:.1f},{:.1f}", points.empty() ? "" : " ", x_px(series.x[i]),
                            canvas.y_px(series.y[i]));
    }
    flush();
    const Marker marker = resolve_marker(series, s);
    if (marker == Marker::kNone) continue;
    for (size_t i = 0; i < series.x.size(); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) continue;
      // The last point always gets its marker: the legend is ordered by line ends.
      if (i % static_cast<size_t>(series.marker_every) != 0 && i + 1 != series.x.size()) continue;
      out += marker_svg(marker, x_px(series.x[i]), canvas.y_px(series.y[i]), color);
    }
  }
  return canvas.finish();
}

std::string render(const BarChart& chart) {
  ISER_CHECK(!chart.series.empty(), "svg: bar chart '{}' has no series", chart.title);
  ISER_CHECK(!chart.categories.empty(), "svg: bar chart '{}' has no categories", chart.title);
  std::vector<double> ys;
  std::vector<LegendEntry> legend;
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const BarSeries& series = chart.series[s];
    ISER_CHECK(series.values.size() == chart.categories.size(),
               "svg: bar series '{}' has {} values for {} categories", series.name,
               series.values.size(), chart.categories.size());
    ISER_CHECK(series.hatched.empty() || series.hatched.size() == chart.categories.size(),
               "svg: bar series '{}' has {} hatch flags for {} categories", series.name,
               series.hatched.size(), chart.categories.size());
    ys.insert(ys.end(), series.values.begin(), series.values.end());
    if (!series.name.empty()) {
      legend.push_back(
          {series.name, series_color(series.color, s), false, false, "", Marker::kNone});
    }
  }
  for (const RefLine& line : chart.ref_lines) ys.push_back(line.value);
  // Category labels never overlap: the chart widens until the longest label line fits.
  int label_lines = 1;
  size_t longest_line = 0;
  for (const std::string& label : chart.categories) {
    label_lines = std::max(label_lines, 1 + static_cast<int>(std::ranges::count(label, '\n')));
    for (size_t begin = 0; begin <= label.size();) {
      const size_t end = std::min(label.find('\n', begin), label.size());
      longest_line = std::max(longest_line, end - begin);
      begin = end + 1;
    }
  }
  const double min_plot_w = static_cast<double>(chart.categories.size()) *
                            (kCharWidth * static_cast<double>(longest_line) + 10);
  Canvas canvas(chart.width, chart.height, chart.title, chart.y_axis,
                resolve_range(chart.y_axis, ys, "y"), legend, chart.ref_lines, label_lines,
                min_plot_w);
  std::string& out = canvas.out();
  const double group_w =
      (canvas.right() - canvas.left()) / static_cast<double>(chart.categories.size());
  const double bar_w = group_w * 0.8 / static_cast<double>(chart.series.size());
  const double base_y = canvas.y_px(std::max(canvas.y_lo(), 0.0));
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    const double group_x = canvas.left() + group_w * static_cast<double>(c);
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const BarSeries& series = chart.series[s];
      const double v = series.values[c];
      if (!std::isfinite(v)) continue;
      const double x = group_x + group_w * 0.1 + bar_w * static_cast<double>(s);
      const double y = std::clamp(canvas.y_px(v), 0.0, canvas.bottom());
      const double top = std::min(y, base_y);
      const double h = std::abs(base_y - y);
      const std::string rect = fmt::format(
          "x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"", x, top, bar_w, h);
      out += fmt::format("<rect {} fill=\"{}\"><title>{}: {}</title></rect>\n", rect,
                         escape_xml(series_color(series.color, s)), escape_xml(series.name),
                         escape_xml(format_number(v)));
      if (!series.hatched.empty() && series.hatched[c]) {
        out += fmt::format("<rect {} fill=\"url(#hatch)\"/>\n", rect);
      }
    }
    // A category label may span several lines ('\n').
    double line_y = canvas.bottom() + 17;
    size_t begin = 0;
    const std::string& label = chart.categories[c];
    while (begin <= label.size()) {
      const size_t end = std::min(label.find('\n', begin), label.size());
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                         group_x + group_w / 2, line_y,
                         escape_xml(std::string_view(label).substr(begin, end - begin)));
      line_y += 14;
      begin = end + 1;
    }
  }
  canvas.draw_x_label(chart.x_label);
  canvas.draw_ref_lines(chart.ref_lines);
  return canvas.finish();
}

void write_file(const std::filesystem::path& path, std::string_view document) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ISER_CHECK(out.good(), "{}: cannot open for writing", path.string());
  out.write(document.data(), static_cast<std::streamsize>(document.size()));
  out.close();
  ISER_CHECK(out.good(), "{}: write failed", path.string());
}

}  // namespace iser::svg

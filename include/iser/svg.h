// Dependency-free SVG charts for reports: line charts (numeric x) and grouped bar charts
// (categorical x), with axes, ticks, grid, legend, title and labelled horizontal reference lines.
// Output is a self-contained SVG 1.1 document string; text is XML-escaped.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace iser::svg {

struct Axis {
  std::string label;
  std::optional<double> min;  // unset: from the data (and 0 when include_zero)
  std::optional<double> max;
  bool include_zero = true;   // auto ranges reach down (or up) to 0
  std::vector<double> ticks;  // empty: about five "nice" ticks (1, 2, 2.5, 5 x 10^k steps)
  std::function<std::string(double)> format;  // empty: format_number
};

// A horizontal dashed line across the plot at `value`; its label goes into the legend.
struct RefLine {
  double value = 0;
  std::string label;
  std::string color = "#555555";
};

// Marker shapes; kAuto picks one per series index, so lines differ by more than colour.
enum class Marker { kAuto, kNone, kCircle, kSquare, kTriangle, kDiamond, kTriangleDown, kPlus };

struct LineSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;  // NaN leaves a gap
  std::string color;      // empty: palette_color(series index)
  bool dashed = false;    // shorthand for dash = "7 4"
  bool markers = true;    // false: no markers whatever `marker` says
  std::string dash;       // SVG stroke-dasharray, e.g. "2 3"; empty: solid (or `dashed`)
  Marker marker = Marker::kAuto;
  int marker_every = 1;  // draw a marker on every n-th point (dense series stay readable)
};

struct LineChart {
  std::string title;
  Axis x_axis = [] {
    Axis axis;
    axis.include_zero = false;  // x data rarely starts at 0 (e.g. group sizes 2..16)
    return axis;
  }();
  Axis y_axis;
  std::vector<LineSeries> series;
  std::vector<RefLine> ref_lines;
  // Legend rows in the order of the lines' right ends, top first (a reader matches a line to
  // its entry by position); false: series order.
  bool legend_by_line_end = true;
  int width = 760;
  int height = 440;
};

struct BarSeries {
  std::string name;
  std::vector<double> values;  // one per category; NaN draws no bar
  std::string color;           // empty: palette_color(series index)
  std::vector<bool> hatched;   // optional, one per category: hatch that bar (e.g. "below a line")
};

struct BarChart {
  std::string title;
  std::vector<std::string> categories;  // x labels; '\n' splits a label over lines
  std::string x_label;
  Axis y_axis;
  std::vector<BarSeries> series;  // bars of one category are grouped side by side
  std::vector<RefLine> ref_lines;
  int width = 760;  // a minimum: the chart widens until every category label fits
  int height = 440;
};

// Throw iser::Error on inconsistent input (size mismatch, no series, empty range, bad size).
std::string render(const LineChart& chart);
std::string render(const BarChart& chart);

// Writes `document` to `path` (throws iser::Error naming the path on failure).
void write_file(const std::filesystem::path& path, std::string_view document);

// Helpers, exposed for reuse and tests.
std::string escape_xml(std::string_view text);
std::string_view palette_color(size_t idx);  // a colour-blind-safe cycle of 8 (Okabe-Ito)
std::vector<double> nice_ticks(double lo, double hi, int target_count = 5);
std::string format_number(double value);  // "0", "2.5", "750", "30k", "1.5M"

}  // namespace iser::svg

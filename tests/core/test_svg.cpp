#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "iser/error.h"
#include "iser/svg.h"

namespace iser::svg {
namespace {

size_t count(const std::string& text, std::string_view needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

LineChart two_lines() {
  LineChart chart;
  chart.title = "A & B <test>";
  chart.x_axis.label = "g";
  chart.y_axis.label = "GB/s";
  chart.series.push_back(
      {"ring", {2, 4, 8}, {800, 600, 400}, "", false, true, "", Marker::kCircle, 1});
  chart.series.push_back(
      {"sag", {2, 4, 8}, {700, NAN, 450}, "#123456", true, false, "", Marker::kAuto, 1});
  chart.ref_lines.push_back({900, "B_link", "#555555"});
  return chart;
}

TEST(Svg, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 900), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  EXPECT_EQ(nice_ticks(0, 1), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_EQ(nice_ticks(2, 16), (std::vector<double>{0, 5, 10, 15, 20}));
  EXPECT_EQ(nice_ticks(2, 16, 8), (std::vector<double>{2, 4, 6, 8, 10, 12, 14, 16}));
  EXPECT_EQ(nice_ticks(0, 32768), (std::vector<double>{0, 10000, 20000, 30000, 40000}));
  EXPECT_EQ(nice_ticks(-5, 5).front(), -6);
  EXPECT_EQ(nice_ticks(3, 3).size(), 6u);  // an empty range widens to [3, 4]
  EXPECT_THROW(nice_ticks(2, 1), Error);
  EXPECT_THROW(nice_ticks(0, INFINITY), Error);
}

TEST(Svg, FormatNumber) {
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(2.5), "2.5");
  EXPECT_EQ(format_number(750), "750");
  EXPECT_EQ(format_number(30000), "30k");
  EXPECT_EQ(format_number(16667), "16667");
  EXPECT_EQ(format_number(1.5e6), "1.5M");
  EXPECT_EQ(format_number(NAN), "");
}

TEST(Svg, EscapesText) {
  EXPECT_EQ(escape_xml("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
}

TEST(Svg, LineChartHasEverySeriesLegendTicksAndReferenceLine) {
  const std::string doc = render(two_lines());
  EXPECT_EQ(doc.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(doc.find("</svg>\n"), std::string::npos);
  EXPECT_NE(doc.find("A &amp; B &lt;test&gt;"), std::string::npos);  // escaped title
  EXPECT_EQ(doc.find("<test>"), std::string::npos);
  // ring: one polyline; sag: the NaN splits it into two one-point polylines.
  EXPECT_EQ(count(doc, "<polyline"), 3u);
  // sag's two pieces plus its legend swatch (the legend shows each line's dash and marker).
  EXPECT_EQ(count(doc, "stroke-dasharray=\"7 4\""), 3u);
  EXPECT_EQ(count(doc, "<circle"), 4u);  // markers only for ring: 3 points + its legend swatch
  EXPECT_NE(doc.find(">ring</text>"), std::string::npos);
  EXPECT_NE(doc.find(">sag</text>"), std::string::npos);
  EXPECT_NE(doc.find(">B_link</text>"), std::string::npos);
  EXPECT_NE(doc.find(">1000</text>"), std::string::npos);  // y reaches the reference line's tick
  EXPECT_NE(doc.find("#123456"), std::string::npos);
  EXPECT_NE(doc.find(std::string(palette_color(0))), std::string::npos);
}

TEST(Svg, FixedTicksAndCustomFormat) {
  LineChart chart = two_lines();
  chart.x_axis.ticks = {2, 4, 8};
  chart.y_axis.format = [](double v) { return std::to_string(static_cast<int>(v)) + "!"; };
  const std::string doc = render(chart);
  EXPECT_NE(doc.find(">400!</text>"), std::string::npos);
  EXPECT_NE(doc.find(">8</text>"), std::string::npos);
  EXPECT_EQ(doc.find(">6</text>"), std::string::npos);
}

TEST(Svg, BarChartGroupsHatchesAndMultiLineLabels) {
  BarChart chart;
  chart.title = "ratios";
  chart.categories = {"0\n8,192", "1\n8,192", "2\n8,192"};
  chart.series.push_back({"routed", {18725, 16913, 15420}, "", {false, false, true}});
  chart.series.push_back({"shared", {28087, 25369, 23130}, "", {}});
  chart.ref_lines.push_back({16667, "device", "#333333"});
  const std::string doc = render(chart);
  EXPECT_EQ(count(doc, "<title>"), 6u);  // one bar per series and category
  EXPECT_EQ(count(doc, "url(#hatch)"), 1u);
  EXPECT_EQ(count(doc, ">8,192</text>"), 3u);
  EXPECT_NE(doc.find(">device</text>"), std::string::npos);
  EXPECT_NE(doc.find(">30k</text>"), std::string::npos);
}

TEST(Svg, RejectsInconsistentCharts) {
  LineChart empty;
  EXPECT_THROW(render(empty), Error);
  LineChart mismatch = two_lines();
  mismatch.series[0].y.pop_back();
  EXPECT_THROW(render(mismatch), Error);
  LineChart tiny = two_lines();
  tiny.width = 10;
  EXPECT_THROW(render(tiny), Error);
  LineChart inverted = two_lines();
  inverted.y_axis.min = 5;
  inverted.y_axis.max = 1;
  EXPECT_THROW(render(inverted), Error);
  BarChart bars;
  bars.categories = {"a", "b"};
  bars.series.push_back({"s", {1}, "", {}});
  EXPECT_THROW(render(bars), Error);
  bars.series[0].values = {1, 2};
  bars.series[0].hatched = {true};
  EXPECT_THROW(render(bars), Error);
}

TEST(Svg, WriteFile) {
  const auto path = std::filesystem::temp_directory_path() / "iser_test_chart.svg";
  write_file(path, render(two_lines()));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), render(two_lines()));
  std::filesystem::remove(path);
  EXPECT_THROW(write_file("/nonexistent-dir/x.svg", "x"), Error);
}

TEST(Svg, LegendFollowsTheLinesRightEndsAndShowsEachStyle) {
  LineChart chart;
  chart.series.push_back({"low", {0, 1}, {5, 1}, "", false, true, "", Marker::kAuto, 1});
  chart.series.push_back({"high", {0, 1}, {1, 9}, "", false, true, "2 3", Marker::kAuto, 1});
  chart.series.push_back({"mid", {0, 1, 2}, {3, 4, NAN}, "", false, true, "", Marker::kAuto, 1});
  const std::string doc = render(chart);
  // Right ends: high 9, mid 4 (its last finite point), low 1: the legend lists them top down.
  const size_t high = doc.find(">high</text>"), mid = doc.find(">mid</text>"),
               low = doc.find(">low</text>");
  ASSERT_NE(high, std::string::npos);
  EXPECT_LT(high, mid);
  EXPECT_LT(mid, low);
  // Automatic markers differ per series: a circle (low), a square (high), a triangle (mid), each
  // on its points and in its legend swatch.
  EXPECT_EQ(count(doc, "<circle"), 3u);
  EXPECT_EQ(count(doc, "width=\"6.5\""), 3u);
  EXPECT_EQ(count(doc, "<polygon"), 3u);
  EXPECT_EQ(count(doc, "stroke-dasharray=\"2 3\""), 2u);  // high's line and its swatch
  chart.legend_by_line_end = false;
  const std::string in_order = render(chart);
  EXPECT_LT(in_order.find(">low</text>"), in_order.find(">high</text>"));
}

TEST(Svg, MarkerEveryThinsMarkersButKeepsTheLastPoint) {
  LineChart chart;
  chart.series.push_back(
      {"s", {0, 1, 2, 3, 4}, {1, 2, 3, 4, 5}, "", false, true, "", Marker::kCircle, 3});
  // Points 0 and 3, the last point 4, and the legend swatch.
  EXPECT_EQ(count(render(chart), "<circle"), 4u);
  chart.series[0].marker_every = 0;
  EXPECT_THROW(render(chart), Error);
}

}  // namespace
}  // namespace iser::svg

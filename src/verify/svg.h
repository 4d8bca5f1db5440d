// Building blocks of the HTML report (internal to the verify module): escaping, number
// formatting, tolerant access to the result JSON, axis scales and a small inline-SVG writer.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::verify::html {

// The text shown for a missing, null or non-finite value.
inline constexpr std::string_view kDash = "\xE2\x80\x94";  // an em dash

// `s` safe as HTML text and as a quoted attribute value (& < > " ' escaped; invalid UTF-8
// bytes become U+FFFD so a hostile string cannot break the page's encoding).
std::string esc(std::string_view s);

// `v` with `decimals` digits after the point (C locale); kDash when absent or non-finite.
std::string fixed(std::optional<double> v, int decimals);
// Milliseconds: one decimal below 100, none from 100 on; kDash when absent.
std::string ms(std::optional<double> v);
// A share in [0, 1] as a percentage with one decimal ("71.0 %"); kDash when absent.
std::string share(std::optional<double> v);
// An integer count; kDash when absent.
std::string count(std::optional<double> v);
// A compact axis tick label (no trailing zeros, "k" from 10,000 on).
std::string tick(double v);

// Tolerant JSON access: the member `key` of an object, or nullptr when `j` is not an object or
// the member is missing or null.
const nlohmann::json* field(const nlohmann::json& j, std::string_view key);
// A finite number (booleans are not numbers); nullopt otherwise.
std::optional<double> num(const nlohmann::json* j);
std::optional<double> num(const nlohmann::json& j, std::string_view key);
// A string member as is, a number or boolean as text, "" when missing; other values as compact
// JSON text.
std::string str(const nlohmann::json& j, std::string_view key);
std::string str(const nlohmann::json* j);
// A boolean member; nullopt when missing or not a boolean.
std::optional<bool> flag(const nlohmann::json& j, std::string_view key);
// The elements of an array member (nothing when it is not an array).
std::vector<const nlohmann::json*> items(const nlohmann::json& j, std::string_view key);

// A map from a data interval to pixels, linear or base-10 logarithmic.
struct Scale {
  double d0 = 0, d1 = 1;  // the domain
  double r0 = 0, r1 = 1;  // the range in pixels
  bool log = false;
  double operator()(double v) const;
  // Tick positions inside the domain (about `target` of them for a linear scale; 1-2-5 or
  // powers of ten for a logarithmic one).
  std::vector<double> ticks(int target) const;
};
// A linear scale over [lo, hi] widened to round tick steps.
Scale linear_scale(double lo, double hi, double r0, double r1, int target);
// Logarithmic when the positive values span more than 30x (`hi / lo > 30`), linear from 0 else.
Scale latency_scale(double lo, double hi, double r0, double r1);

// The plot area of a chart inside its SVG canvas.
struct Area {
  double left, top, width, height;
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

// An inline <svg> element written as text. Every string argument that is shown is escaped;
// `cls` arguments name classes of the page's style sheet and `color` arguments are written
// as given (callers pass constants only).
class Svg {
 public:
  Svg(int width, int height, std::string_view label);
  void line(double x1, double y1, double x2, double y2, std::string_view cls);
  void rect(double x, double y, double w, double h, std::string_view color,
            std::string_view title = {});
  void circle(double cx, double cy, double r, std::string_view cls, std::string_view title = {});
  void cross(double cx, double cy, double r, std::string_view cls, std::string_view title = {});
  void path(const std::string& d, std::string_view cls, std::string_view color = {});
  // anchor: "start", "middle" or "end".
  void text(double x, double y, std::string_view s, std::string_view cls,
            std::string_view anchor = "start");
  // A label rotated to read upwards, centred on (x, y).
  void vlabel(double x, double y, std::string_view s);
  // Gridlines, ticks and labels of a bottom x axis / left y axis of `a`.
  void x_axis(const Scale& x, const Area& a, std::string_view label, int target = 8);
  void y_axis(const Scale& y, const Area& a, std::string_view label, int target = 5);
  std::string finish();

 private:
  std::string out_;
};

// A number as an SVG coordinate (one decimal).
std::string coord(double v);
// Appends the path command `cmd` ('M' or 'L') to the point (x, y) to the path data `d`.
void path_to(std::string& d, char cmd, double x, double y);

}  // namespace mmrt::verify::html

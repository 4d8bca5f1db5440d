#include "verify/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mmrt::verify::html {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && b(i + 1) < 0xA0) return 0;  // overlong
  if (c == 0xED && b(i + 1) > 0x9F) return 0;  // surrogates
  if (c == 0xF0 && b(i + 1) < 0x90) return 0;  // overlong
  if (c == 0xF4 && b(i + 1) > 0x8F) return 0;  // beyond U+10FFFF
  return n;
}

std::string format(const char* spec, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

// 1, 2 or 5 times a power of ten, near `x`.
double nice_step(double x) {
  if (!(x > 0) || !std::isfinite(x)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(x)));
  const double f = x / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

std::string_view trim_zeros(std::string& s) {
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

}  // namespace

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_length(s, i);
      if (n == 0) {
        out += kReplacement;
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
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
        out += "&#39;";
        break;
      case '\t':
      case '\n':
      case '\r':
        out += static_cast<char>(c);
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += kReplacement;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out;
}

std::string fixed(std::optional<double> v, int decimals) {
  if (!v || !std::isfinite(*v)) return std::string(kDash);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 6), *v);
  std::string s = buf;
  if (!s.empty() && s[0] == '-' && s.find_first_not_of("0.", 1) == std::string::npos)
    s.erase(0, 1);  // no "-0.0"
  return s;
}

std::string ms(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return std::string(kDash);
  return fixed(v, std::fabs(*v) < 99.95 ? 1 : 0);  // 99.96 is "100", not "100.0"
}

std::string share(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return std::string(kDash);
  return fixed(*v * 100.0, 1) + " %";
}

std::string count(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return std::string(kDash);
  return fixed(std::round(*v), 0);
}

std::string tick(double v) {
  if (!std::isfinite(v)) return std::string(kDash);
  if (std::fabs(v) < 1e-9) return "0";
  std::string s;
  if (std::fabs(v) >= 10000) {
    s = format("%.1f", v / 1000.0);
    return std::string(trim_zeros(s)) + "k";
  }
  s = format(std::fabs(v) >= 100 ? "%.0f" : "%.2f", v);
  return std::string(trim_zeros(s));
}

const nlohmann::json* field(const nlohmann::json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> num(const nlohmann::json* j) {
  if (j == nullptr || !j->is_number()) return std::nullopt;
  const double v = j->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<double> num(const nlohmann::json& j, std::string_view key) {
  return num(field(j, key));
}

std::string str(const nlohmann::json* j) {
  if (j == nullptr) return "";
  if (j->is_string()) return j->get<std::string>();
  if (j->is_boolean()) return j->get<bool>() ? "true" : "false";
  if (j->is_number_integer() || j->is_number_unsigned()) return j->dump();
  if (j->is_number()) {
    const auto v = num(j);
    if (!v) return "";
    std::string s = format("%.6f", *v);
    return std::string(trim_zeros(s));
  }
  return j->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string str(const nlohmann::json& j, std::string_view key) {
  return str(field(j, key));
}

std::optional<bool> flag(const nlohmann::json& j, std::string_view key) {
  const nlohmann::json* f = field(j, key);
  if (f == nullptr || !f->is_boolean()) return std::nullopt;
  return f->get<bool>();
}

std::vector<const nlohmann::json*> items(const nlohmann::json& j, std::string_view key) {
  std::vector<const nlohmann::json*> out;
  const nlohmann::json* a = field(j, key);
  if (a == nullptr || !a->is_array()) return out;
  out.reserve(a->size());
  for (const auto& e : *a) out.push_back(&e);
  return out;
}

double Scale::operator()(double v) const {
  double a = d0, b = d1, x = v;
  if (log) {
    a = std::log10(d0);
    b = std::log10(d1);
    x = std::log10(std::max(v, d0));  // zero and below sit on the axis
  }
  if (!(b != a)) return r0;
  return r0 + (x - a) / (b - a) * (r1 - r0);
}

std::vector<double> Scale::ticks(int target) const {
  std::vector<double> out;
  if (!std::isfinite(d0) || !std::isfinite(d1) || d1 <= d0) return out;
  if (log) {
    const int lo = static_cast<int>(std::floor(std::log10(d0)));
    const int hi = static_cast<int>(std::ceil(std::log10(d1)));
    const int decades = hi - lo;
    const std::vector<double> mult =
        decades <= 2 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
    const int every = decades > 8 ? 2 : 1;
    for (int e = lo; e <= hi; ++e) {
      if ((e - lo) % every != 0) continue;
      for (double m : mult) {
        const double v = m * std::pow(10.0, e);
        if (v >= d0 * 0.999 && v <= d1 * 1.001) out.push_back(v);
      }
    }
    return out;
  }
  const double step = nice_step((d1 - d0) / std::max(target, 1));
  const double eps = step * 1e-6;
  for (double v = std::ceil((d0 - eps) / step) * step; v <= d1 + eps && out.size() < 100; v += step)
    out.push_back(std::fabs(v) < eps ? 0.0 : v);
  return out;
}

Scale linear_scale(double lo, double hi, double r0, double r1, int target) {
  Scale s;
  s.r0 = r0;
  s.r1 = r1;
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-9) hi = lo + (std::fabs(lo) > 0 ? std::fabs(lo) * 0.1 : 1.0);
  const double step = nice_step((hi - lo) / std::max(target, 1));
  s.d0 = std::floor(lo / step + 1e-9) * step;
  s.d1 = std::ceil(hi / step - 1e-9) * step;
  if (s.d1 <= s.d0) s.d1 = s.d0 + step;
  return s;
}

Scale latency_scale(double lo, double hi, double r0, double r1) {
  if (std::isfinite(lo) && std::isfinite(hi) && lo > 0 && hi / lo > 30) {
    Scale s;
    s.r0 = r0;
    s.r1 = r1;
    s.log = true;
    s.d0 = lo / 1.25;
    s.d1 = hi * 1.25;
    return s;
  }
  return linear_scale(0, std::isfinite(hi) && hi > 0 ? hi * 1.05 : 1.0, r0, r1, 5);
}

std::string coord(double v) {
  if (!std::isfinite(v)) v = 0;
  return fixed(v, 1);
}

void path_to(std::string& d, char cmd, double x, double y) {
  d += cmd;
  d += coord(x);
  d += ' ';
  d += coord(y);
}

Svg::Svg(int width, int height, std::string_view label) {
  out_ = "<svg class=\"chart\" viewBox=\"0 0 " + std::to_string(width) + " " +
         std::to_string(height) + "\" role=\"img\" aria-label=\"" + esc(label) + "\">\n";
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view cls) {
  out_ += "<line x1=\"" + coord(x1) + "\" y1=\"" + coord(y1) + "\" x2=\"" + coord(x2) + "\" y2=\"" +
          coord(y2) + "\" class=\"" + std::string(cls) + "\"/>\n";
}

void Svg::rect(double x, double y, double w, double h, std::string_view color,
               std::string_view title) {
  out_ += "<rect x=\"" + coord(x) + "\" y=\"" + coord(y) + "\" width=\"" + coord(std::max(w, 0.0)) +
          "\" height=\"" + coord(std::max(h, 0.0)) + "\" fill=\"" + std::string(color) + "\"";
  if (title.empty()) {
    out_ += "/>\n";
  } else {
    out_ += "><title>" + esc(title) + "</title></rect>\n";
  }
}

void Svg::circle(double cx, double cy, double r, std::string_view cls, std::string_view title) {
  out_ += "<circle cx=\"" + coord(cx) + "\" cy=\"" + coord(cy) + "\" r=\"" + coord(r) +
          "\" class=\"" + std::string(cls) + "\"";
  if (title.empty()) {
    out_ += "/>\n";
  } else {
    out_ += "><title>" + esc(title) + "</title></circle>\n";
  }
}

void Svg::cross(double cx, double cy, double r, std::string_view cls, std::string_view title) {
  std::string d;
  path_to(d, 'M', cx - r, cy - r);
  path_to(d, 'L', cx + r, cy + r);
  path_to(d, 'M', cx - r, cy + r);
  path_to(d, 'L', cx + r, cy - r);
  out_ += "<path d=\"" + d + "\" class=\"" + std::string(cls) + "\"";
  if (title.empty()) {
    out_ += "/>\n";
  } else {
    out_ += "><title>" + esc(title) + "</title></path>\n";
  }
}

void Svg::path(const std::string& d, std::string_view cls, std::string_view color) {
  out_ += "<path d=\"" + d + "\" class=\"" + std::string(cls) + "\"";
  if (!color.empty()) out_ += " stroke=\"" + std::string(color) + "\"";
  out_ += "/>\n";
}

void Svg::text(double x, double y, std::string_view s, std::string_view cls,
               std::string_view anchor) {
  out_ += "<text x=\"" + coord(x) + "\" y=\"" + coord(y) + "\" class=\"" + std::string(cls) +
          "\" text-anchor=\"" + std::string(anchor) + "\">" + esc(s) + "</text>\n";
}

void Svg::x_axis(const Scale& x, const Area& a, std::string_view label, int target) {
  for (double t : x.ticks(target)) {
    const double px = x(t);
    line(px, a.top, px, a.bottom(), "grid");
    line(px, a.bottom(), px, a.bottom() + 4, "axis");
    text(px, a.bottom() + 16, tick(t), "tick", "middle");
  }
  line(a.left, a.bottom(), a.right(), a.bottom(), "axis");
  if (!label.empty()) text(a.left + a.width / 2, a.bottom() + 32, label, "label", "middle");
}

void Svg::y_axis(const Scale& y, const Area& a, std::string_view label, int target) {
  for (double t : y.ticks(target)) {
    const double py = y(t);
    line(a.left, py, a.right(), py, "grid");
    line(a.left - 4, py, a.left, py, "axis");
    text(a.left - 7, py + 4, tick(t), "tick", "end");
  }
  line(a.left, a.top, a.left, a.bottom(), "axis");
  if (!label.empty()) vlabel(14, a.top + a.height / 2, label);
}

void Svg::vlabel(double x, double y, std::string_view s) {
  out_ += "<text x=\"" + coord(x) + "\" y=\"" + coord(y) +
          "\" class=\"label\" text-anchor=\"middle\" dominant-baseline=\"middle\" "
          "transform=\"rotate(-90 " +
          coord(x) + " " + coord(y) + ")\">" + esc(s) + "</text>\n";
}

std::string Svg::finish() {
  out_ += "</svg>\n";
  return std::move(out_);
}

}  // namespace mmrt::verify::html

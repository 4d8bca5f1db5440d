// The sections of the HTML report (internal to the verify module). Each *_body function returns
// the HTML that follows the section's heading, from the whole verify result; all of them
// tolerate missing, null and mistyped fields.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mmrt::verify::html {

std::string timeline_body(const nlohmann::json& result);     // report_timeline.cpp
std::string cdf_body(const nlohmann::json& result);          // report_charts.cpp
std::string attribution_body(const nlohmann::json& result);  // report_charts.cpp
std::string classes_body(const nlohmann::json& result);      // report_tables.cpp
std::string streaks_body(const nlohmann::json& result);
std::string drift_body(const nlohmann::json& result);
std::string preflight_body(const nlohmann::json& result);
std::string baseline_body(const nlohmann::json& result);
std::string fingerprint_body(const nlohmann::json& result);

// A coloured pill for a status word: pass/ok green, fail/error red, warn/insufficient/invalid
// amber, anything else grey. The word is shown escaped; kDash when empty.
std::string pill(std::string_view status);

// One legend entry: a colour swatch (`style` is "dot", "box", "cross" or "dash") and a label.
struct LegendEntry {
  std::string color;  // a constant of the report's palette
  std::string style;
  std::string label;  // shown escaped
};
std::string legend(const std::vector<LegendEntry>& entries);

// The colour of the i-th class (a fixed palette, repeating).
std::string_view class_color(size_t i);

// The classes of the result in table order without "all" (names from `classes`, then any other
// class that appears in `requests`).
std::vector<std::string> class_names(const nlohmann::json& result);

// A paragraph of muted explanatory text (escaped).
std::string note(std::string_view text);

}  // namespace mmrt::verify::html

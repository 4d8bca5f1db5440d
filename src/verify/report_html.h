// The offline HTML report of `mmrt verify`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mmrt::verify {

// The verify result (the JSON summary the run writes) as one self-contained HTML page: inline
// CSS and inline SVG charts, no scripts at all, no external fonts, images or links, so it can
// be mailed or archived and opened anywhere. Sections, in order, each a <section> with that id:
// verdict (with the #verdict-banner element), timeline, cdf, classes, attribution, streaks,
// drift, preflight, baseline, fingerprint. Every string from the result is HTML-escaped and a
// missing, null or mistyped field shows as an em dash. Deterministic for the same input.
std::string render_html(const nlohmann::json& result);

}  // namespace mmrt::verify

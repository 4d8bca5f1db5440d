// The console summary of a verify result: the verdict first (MLPerf's "Result is : VALID"
// habit), every reason, the per-class table and rules, the generator's lag, the attribution of
// violations, the preflight's findings and the baseline's failing rows.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mmrt::verify {

std::string render_text(const nlohmann::json& result);

}  // namespace mmrt::verify

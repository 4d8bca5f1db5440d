// A `mmrt verify` workload file (the first byte picks YAML or JSON), parsed and, when accepted,
// scheduled. Any input may be refused with an mmrt::Error; nothing may crash, hang or allocate
// without bound (the parser bounds the schedule's size; here it is also kept small for speed).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "verify/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    mmrt::verify::Workload w = mmrt::verify::parse_workload(text, data[0] & 1, "fuzz");
    double expected = w.rate * w.duration_s;
    for (const auto& f : w.streams) expected += f.fps * w.duration_s;
    if (expected < 20'000) (void)mmrt::verify::make_schedule(w, {3, 1, 4, 1, 5});
  } catch (const mmrt::Error&) {
  }
  return 0;
}

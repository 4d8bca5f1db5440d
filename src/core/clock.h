// Monotonic clock helpers used for timelines and speed reports.
#pragma once

#include <chrono>
#include <cstdint>

namespace mmrt {

using Clock = std::chrono::steady_clock;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Seconds elapsed since construction.
class Stopwatch {
 public:
  Stopwatch() : start_(now_ns()) {}
  double seconds() const { return static_cast<double>(now_ns() - start_) * 1e-9; }
  double millis() const { return static_cast<double>(now_ns() - start_) * 1e-6; }
  void reset() { start_ = now_ns(); }

 private:
  int64_t start_;
};

}  // namespace mmrt

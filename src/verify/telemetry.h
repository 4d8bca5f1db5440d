// Host telemetry during a `mmrt verify` run: temperature, thermal throttle counters, steal and
// busy time, load and GPU clock event reasons, sampled on a thread at a fixed period.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "verify/preflight.h"

namespace mmrt::verify {

struct TelemetrySample {
  double t_s = 0;  // seconds since the run's t0
  // Hottest thermal_zone*/temp or hwmon temp*_input (the files hold millidegrees); NaN if none.
  double temp_c = std::numeric_limits<double>::quiet_NaN();
  int64_t throttle_count = -1;         // core + package throttle counters; -1 if not exposed
  double steal_pct = 0, busy_pct = 0;  // since the previous sample (since boot without one)
  double load1 = 0;                    // /proc/loadavg
  std::string gpu_reasons;  // active GPU clock event reasons joined by ", " (live, nvidia-smi)
  std::optional<sys::CpuTimes> cpu_times;  // the cumulative counters the percentages came from
  double gpu_t_s = -1;                     // when gpu_reasons was last queried; -1: never
};

// Minimum seconds between two GPU queries.
inline constexpr double kGpuSamplePeriodS = 5.0;

// [{"t_s","temp_c","throttle","steal_pct","busy_pct","load1","gpu_reasons"}]; NaN values as null.
nlohmann::json telemetry_json(const std::vector<TelemetrySample>& samples);

// Samples on its own thread every `period` from start() until stop(); t0_ns is on the
// core/clock.h now_ns() timeline. The first sample is the reading at start() (its steal and busy
// are NaN: no interval yet), then one per period, and a last one at stop().
class TelemetrySampler {
 public:
  // Throws NotFound when a root does not exist, InvalidArgument for a non-positive period.
  TelemetrySampler(SystemRoots roots, std::chrono::milliseconds period, int64_t t0_ns);
  ~TelemetrySampler();  // stops
  TelemetrySampler(const TelemetrySampler&) = delete;
  TelemetrySampler& operator=(const TelemetrySampler&) = delete;

  void start();                                  // no-op while running
  void stop();                                   // joins the thread; idempotent
  std::vector<TelemetrySample> samples() const;  // thread-safe copy

  // One sample at `t_s`; steal/busy over the interval since `previous` (since boot without one);
  // the GPU is queried (live only) when `previous` is null or queried it >= 5 s before.
  static TelemetrySample read_once(const SystemRoots& roots, const TelemetrySample* previous,
                                   double t_s);

 private:
  void loop();

  const SystemRoots roots_;
  const std::chrono::milliseconds period_;
  const int64_t t0_ns_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<TelemetrySample> samples_;
  std::thread thread_;
};

}  // namespace mmrt::verify

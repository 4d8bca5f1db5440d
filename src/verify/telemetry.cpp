// The telemetry sampler: bounded reads through the preflight's readers on a background thread.
#include "verify/telemetry.h"

#include <cmath>

#include "core/clock.h"
#include "core/error.h"

namespace mmrt::verify {
namespace {

std::string gpu_reasons(const SystemRoots& roots) {
  const auto exe = sys::find_nvidia_smi(roots);
  if (!exe) return "";
  const auto text = sys::run_nvidia_smi(*exe, "-q -d PERFORMANCE");
  if (!text) return "";
  std::string out;
  for (const std::string& r : active_gpu_clock_reasons(*text)) out += (out.empty() ? "" : ", ") + r;
  return out;
}

}  // namespace

nlohmann::json telemetry_json(const std::vector<TelemetrySample>& samples) {
  nlohmann::json out = nlohmann::json::array();
  for (const TelemetrySample& s : samples) {
    out.push_back(
        {{"t_s", s.t_s},
         {"temp_c", std::isnan(s.temp_c) ? nlohmann::json(nullptr) : nlohmann::json(s.temp_c)},
         {"throttle", s.throttle_count},
         {"steal_pct",
          std::isnan(s.steal_pct) ? nlohmann::json(nullptr) : nlohmann::json(s.steal_pct)},
         {"busy_pct",
          std::isnan(s.busy_pct) ? nlohmann::json(nullptr) : nlohmann::json(s.busy_pct)},
         {"load1", s.load1},
         {"gpu_reasons", s.gpu_reasons}});
  }
  return out;
}

TelemetrySample TelemetrySampler::read_once(const SystemRoots& roots,
                                            const TelemetrySample* previous, double t_s) {
  TelemetrySample s;
  s.t_s = t_s;
  if (const auto t = sys::read_max_temperature_c(roots)) s.temp_c = *t;
  if (const auto c = sys::read_throttle_counts(roots)) s.throttle_count = c->total();
  s.cpu_times = sys::read_cpu_times(roots);
  if (s.cpu_times) {
    const sys::CpuTimes* before = previous && previous->cpu_times ? &*previous->cpu_times : nullptr;
    s.steal_pct = sys::steal_percent(*s.cpu_times, before);
    s.busy_pct = sys::busy_percent(*s.cpu_times, before);
  }
  s.load1 = sys::read_load1(roots).value_or(0);
  if (!roots.live) return s;
  const bool due =
      !previous || previous->gpu_t_s < 0 || t_s - previous->gpu_t_s >= kGpuSamplePeriodS;
  if (due) {
    s.gpu_reasons = gpu_reasons(roots);
    s.gpu_t_s = t_s;
  } else {
    s.gpu_reasons = previous->gpu_reasons;
    s.gpu_t_s = previous->gpu_t_s;
  }
  return s;
}

TelemetrySampler::TelemetrySampler(SystemRoots roots, std::chrono::milliseconds period,
                                   int64_t t0_ns)
    : roots_(std::move(roots)), period_(period), t0_ns_(t0_ns) {
  sys::require_roots(roots_);
  if (period_.count() <= 0) throw InvalidArgument("telemetry period must be positive");
}

TelemetrySampler::~TelemetrySampler() {
  stop();
}

void TelemetrySampler::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void TelemetrySampler::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
}

std::vector<TelemetrySample> TelemetrySampler::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

void TelemetrySampler::loop() {
  const auto seconds = [this] { return static_cast<double>(now_ns() - t0_ns_) * 1e-9; };
  // The baseline for the first interval: recorded for its counters (a throttle event in the
  // first second must count), without interval percentages.
  TelemetrySample last;
  try {
    last = read_once(roots_, nullptr, seconds());
  } catch (const std::exception&) {
    return;
  }
  auto next = Clock::now() + period_;
  std::unique_lock<std::mutex> lock(mu_);
  TelemetrySample first = last;
  first.steal_pct = first.busy_pct = std::nan("");
  samples_.push_back(first);
  while (!cv_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    try {
      last = read_once(roots_, &last, seconds());
    } catch (const std::exception&) {
      return;  // e.g. out of memory: stop sampling, keep what was taken
    }
    lock.lock();
    samples_.push_back(last);
    next += period_;
    const auto now = Clock::now();
    if (next < now) next = now + period_;  // a slow read: skip the missed ticks
  }
  // A last reading at stop, so the final partial interval is seen too.
  lock.unlock();
  try {
    last = read_once(roots_, &last, seconds());
  } catch (const std::exception&) {
    return;
  }
  lock.lock();
  samples_.push_back(last);
}

}  // namespace mmrt::verify

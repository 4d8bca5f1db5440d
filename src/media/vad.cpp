#include "media/vad.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "core/error.h"

namespace mmrt::media {

namespace {

template <typename T>
void check_range(const char* field, T value, T lo, T hi, const char* note = "") {
  if (!(value >= lo && value <= hi)) {  // also refuses NaN
    std::ostringstream m;
    m << "VadConfig." << field << " must be in [" << lo << ", " << hi << "]" << note << ", got "
      << value;
    throw InvalidArgument(m.str());
  }
}

int64_t ms_to_samples(int32_t ms, int32_t rate) {
  return int64_t{ms} * rate / 1000;
}
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

void VadConfig::validate() const {
  check_range("sample_rate", sample_rate, 8000, 192000);
  check_range("frame_ms", frame_ms, 5, 100);
  if (int64_t{sample_rate} * frame_ms % 1000 != 0)
    throw InvalidArgument("VadConfig.frame_ms must be a whole number of samples at sample_rate " +
                          std::to_string(sample_rate) + ", got " + std::to_string(frame_ms));
  const int64_t frame = frame_samples();
  check_range("grid_samples", int64_t{grid_samples}, frame, int64_t{sample_rate} * 10,
              " (one frame .. 10 s)");
  if (grid_samples % frame != 0)
    throw InvalidArgument("VadConfig.grid_samples must be a multiple of the frame (" +
                          std::to_string(frame) + " samples), got " + std::to_string(grid_samples));
  if (highpass_hz != 0)
    check_range("highpass_hz", highpass_hz, 10.0, sample_rate / 4.0, " or 0 (off)");
  if (lowpass_hz != 0)
    check_range("lowpass_hz", lowpass_hz, 100.0, sample_rate * 0.45, " or 0 (off)");
  if (highpass_hz != 0 && lowpass_hz != 0 && !(lowpass_hz > 2 * highpass_hz))
    throw InvalidArgument("VadConfig.lowpass_hz must be above 2 * highpass_hz, got " +
                          std::to_string(lowpass_hz) + " and " + std::to_string(highpass_hz));
  check_range("energy_floor_dbfs", energy_floor_dbfs, -140.0, 0.0);
  check_range("floor_window_ms", floor_window_ms, std::max(100, frame_ms), 60000);
  check_range("start_db", start_db, 0.5, 60.0);
  check_range("stop_db", stop_db, 0.5, start_db, " (at most start_db)");
  check_range("min_speech_ms", min_speech_ms, frame_ms, 10000, " (at least one frame)");
  check_range("min_silence_ms", min_silence_ms, frame_ms, 10000, " (at least one frame)");
  check_range("onset_backtrack_ms", onset_backtrack_ms, 0, 2000);
  check_range("prefix_padding_ms", prefix_padding_ms, 0, 2000);
  check_range("suffix_padding_ms", suffix_padding_ms, 0, 2000);
  check_range("max_segment_ms", max_segment_ms, 1000, 3600000);
  if (ms_to_samples(max_segment_ms, sample_rate) % grid_samples != 0 ||
      int64_t{sample_rate} * max_segment_ms % 1000 != 0)
    throw InvalidArgument("VadConfig.max_segment_ms must be a whole number of grid cells (" +
                          std::to_string(grid_samples) + " samples), got " +
                          std::to_string(max_segment_ms));
}

std::string_view vad_event_name(VadEventKind k) {
  return k == VadEventKind::kSpeechStarted ? "speech_started" : "speech_stopped";
}

VoiceActivityDetector::VoiceActivityDetector(const VadConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  const int32_t rate = cfg_.sample_rate;
  frame_ = cfg_.frame_samples();
  grid_ = cfg_.grid_samples;
  window_ = ceil_div(cfg_.floor_window_ms, cfg_.frame_ms);
  min_speech_ = ceil_div(cfg_.min_speech_ms, cfg_.frame_ms);
  min_silence_ = ceil_div(cfg_.min_silence_ms, cfg_.frame_ms);
  backtrack_ = cfg_.onset_backtrack_ms / cfg_.frame_ms;
  prefix_ = ms_to_samples(cfg_.prefix_padding_ms, rate);
  suffix_ = ms_to_samples(cfg_.suffix_padding_ms, rate);
  max_segment_ = ms_to_samples(cfg_.max_segment_ms, rate);
  // RBJ cookbook biquads with Q = 1/sqrt(2) (Butterworth).
  auto design = [rate](double hz, bool high) {
    const double w0 = 2 * std::numbers::pi * hz / rate;
    const double alpha = std::sin(w0) / std::numbers::sqrt2, c = std::cos(w0);
    const double a0 = 1 + alpha, g = high ? (1 + c) / 2 : (1 - c) / 2;
    return Biquad{.b0 = g / a0,
                  .b1 = (high ? -2 : 2) * g / a0,
                  .b2 = g / a0,
                  .a1 = -2 * c / a0,
                  .a2 = (1 - alpha) / a0};
  };
  if (cfg_.highpass_hz > 0) highpass_ = design(cfg_.highpass_hz, true);
  if (cfg_.lowpass_hz > 0) lowpass_ = design(cfg_.lowpass_hz, false);
  min_index_.resize(static_cast<size_t>(window_));
  min_value_.resize(static_cast<size_t>(window_));
  active_ring_.resize(static_cast<size_t>(min_speech_ + backtrack_));
  pending_.reserve(4);
  reset();
}

void VoiceActivityDetector::reset() {
  highpass_.z1 = highpass_.z2 = lowpass_.z1 = lowpass_.z2 = 0;
  frame_sum_ = 0;
  floor_db_ = cfg_.energy_floor_dbfs;
  frame_fill_ = frames_ = samples_ = 0;
  min_head_ = min_size_ = 0;
  in_speech_ = finished_ = false;
  std::fill(active_ring_.begin(), active_ring_.end(), false);
  loud_run_start_ = loud_run_ = 0;
  last_active_end_ = quiet_run_ = segment_start_ = last_stop_ = 0;
  pending_.clear();
}

int64_t VoiceActivityDetector::history_samples() const {
  const int64_t start = (min_speech_ + backtrack_) * frame_ + prefix_;
  const int64_t stop = min_silence_ * frame_;
  return std::max(start, stop) + grid_ / 2;
}

int64_t VoiceActivityDetector::snap(int64_t sample) const {
  return (std::max<int64_t>(sample, 0) + grid_ / 2) / grid_ * grid_;
}

int64_t VoiceActivityDetector::stop_offset() const {
  const int64_t stop = std::max(snap(last_active_end_ + suffix_), segment_start_ + grid_);
  return std::min(stop, segment_start_ + max_segment_);
}

std::vector<VadEvent> VoiceActivityDetector::push(std::span<const float> samples) {
  if (finished_)
    throw FailedPrecondition("VoiceActivityDetector: push after finish (call reset first)");
  for (size_t i = 0; i < samples.size(); ++i)
    if (!std::isfinite(samples[i]))
      throw InvalidArgument("VoiceActivityDetector: sample " +
                            std::to_string(samples_ + static_cast<int64_t>(i)) + " is not finite");
  for (const float s : samples) {
    const double y = lowpass_.step(highpass_.step(s));
    frame_sum_ += y * y;
    if (++frame_fill_ == frame_) {
      const double mean = frame_sum_ / static_cast<double>(frame_);
      process_frame(std::max(10 * std::log10(std::max(mean, 1e-30)), cfg_.energy_floor_dbfs));
      frame_sum_ = 0;
      frame_fill_ = 0;
    }
  }
  samples_ += static_cast<int64_t>(samples.size());
  std::vector<VadEvent> out;
  release(out, false);
  return out;
}

void VoiceActivityDetector::process_frame(double e) {
  const int64_t i = frames_++;
  // Sliding minimum over the last window_ frames: a ring holding increasing energies.
  auto at = [&](int64_t k) { return static_cast<size_t>((min_head_ + k) % window_); };
  if (min_size_ > 0 && min_index_[at(0)] <= i - window_) {
    min_head_ = (min_head_ + 1) % window_;
    --min_size_;
  }
  while (min_size_ > 0 && min_value_[at(min_size_ - 1)] >= e) --min_size_;
  min_index_[at(min_size_)] = i;
  min_value_[at(min_size_)] = e;
  ++min_size_;
  floor_db_ = min_value_[at(0)];
  const bool loud = e >= floor_db_ + cfg_.start_db;
  const bool active = e >= floor_db_ + cfg_.stop_db;
  const int64_t frame_end = (i + 1) * frame_;
  const int64_t ring = static_cast<int64_t>(active_ring_.size());
  active_ring_[static_cast<size_t>(i % ring)] = active;

  if (!in_speech_) {
    if (!loud)
      loud_run_ = 0;
    else if (loud_run_++ == 0)
      loud_run_start_ = i;
    if (loud_run_ < min_speech_) return;
    // The onset: the earliest active frame at most backtrack_ frames before the loud run.
    int64_t onset = loud_run_start_;
    for (int64_t f = std::max<int64_t>(loud_run_start_ - backtrack_, 0); f < onset; ++f)
      if (active_ring_[static_cast<size_t>(f % ring)]) onset = f;
    segment_start_ = std::max(snap(onset * frame_ - prefix_), last_stop_);
    pending_.push_back({VadEventKind::kSpeechStarted, segment_start_});
    in_speech_ = true;
    last_active_end_ = frame_end;
    quiet_run_ = 0;
    return;
  }
  if (active) {
    last_active_end_ = frame_end;
    quiet_run_ = 0;
  } else {
    ++quiet_run_;
  }
  const bool too_long = frame_end - segment_start_ >= max_segment_;
  if (quiet_run_ >= min_silence_ ||
      (too_long && quiet_run_ > 0 && stop_offset() < segment_start_ + max_segment_)) {
    last_stop_ = stop_offset();
    pending_.push_back({VadEventKind::kSpeechStopped, last_stop_});
    in_speech_ = false;
    loud_run_ = 0;
  } else if (too_long) {  // cut, and go on with a new segment from the cut
    last_stop_ = segment_start_ + max_segment_;
    pending_.push_back({VadEventKind::kSpeechStopped, last_stop_});
    pending_.push_back({VadEventKind::kSpeechStarted, last_stop_});
    segment_start_ = last_stop_;
  }
}

void VoiceActivityDetector::release(std::vector<VadEvent>& out, bool at_end) {
  // A start is returned once one grid cell after it has arrived, a stop once it has: at the end
  // of the stream, a start without that cell is dropped with its stop, and stops are clamped to
  // the last whole grid cell (still after their start).
  const int64_t end_grid = samples_ / grid_ * grid_;
  size_t n = 0;
  for (; n < pending_.size(); ++n) {
    VadEvent& ev = pending_[n];
    const bool start = ev.kind == VadEventKind::kSpeechStarted;
    if (start ? ev.offset + grid_ <= samples_ : ev.offset <= samples_) {
      out.push_back(ev);
    } else if (!at_end) {
      break;
    } else if (start) {
      n = pending_.size();  // a start can only be followed by its own stop
      break;
    } else {
      out.push_back({ev.kind, end_grid});
    }
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
}

std::vector<VadEvent> VoiceActivityDetector::finish() {
  if (finished_) return {};
  finished_ = true;
  if (in_speech_) {
    last_stop_ = std::min(stop_offset(), samples_ / grid_ * grid_);
    pending_.push_back({VadEventKind::kSpeechStopped, std::max(last_stop_, segment_start_)});
    in_speech_ = false;
  }
  std::vector<VadEvent> out;
  release(out, true);
  pending_.clear();
  return out;
}

std::vector<VadSegment> detect_segments(std::span<const float> samples, const VadConfig& cfg) {
  VoiceActivityDetector vad(cfg);
  std::vector<VadEvent> events = vad.push(samples);
  const std::vector<VadEvent> tail = vad.finish();
  events.insert(events.end(), tail.begin(), tail.end());
  std::vector<VadSegment> segs;
  for (const VadEvent& ev : events) {
    if (ev.kind == VadEventKind::kSpeechStarted)
      segs.push_back({ev.offset, ev.offset});
    else
      segs.back().end = ev.offset;
  }
  return segs;
}

}  // namespace mmrt::media

// Voice-activity detection from the energy envelope, for cutting a live audio stream into voice
// segments that are encoded and prefilled one by one (docs/audio.md, "Voice-activity
// detection"). Frames of frame_ms are band-passed and measured in dBFS; the noise floor is the
// minimum frame energy over the last floor_window_ms (it follows a quieter room at once and a
// louder one within the window). A frame is loud at floor + start_db and active at
// floor + stop_db. Speech starts after min_speech_ms of consecutive loud frames, at the earliest
// active frame up to onset_backtrack_ms before them (a plosive's burst before its vowel), and
// stops after min_silence_ms of frames that are not active, at the end of the last one. Offsets
// then move by the paddings and snap to the nearest multiple of grid_samples (640 = one
// Qwen2-Audio token at 16 kHz). Everything is a pure function of the samples: any chunking of a
// stream gives the same events. Memory is bounded (a window of floor_window_ms frame energies).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace mmrt::media {

struct VadConfig {
  int32_t sample_rate = 16000;       // Hz, 8000..192000
  int32_t frame_ms = 20;             // analysis frame, 5..100 ms, a whole number of samples
  int32_t grid_samples = 640;        // offsets are multiples of this; a multiple of the frame
  double highpass_hz = 80;           // 2nd-order Butterworth high-pass (DC, rumble); 0: off
  double lowpass_hz = 3000;          // 2nd-order Butterworth low-pass (hiss); 0: off
  double energy_floor_dbfs = -70;    // quieter frames count as this (digital silence)
  int32_t floor_window_ms = 3000;    // noise floor: minimum frame energy over this window
  double start_db = 8;               // loud: energy >= floor + start_db
  double stop_db = 5;                // active: energy >= floor + stop_db (0 < stop_db <= start_db)
  int32_t min_speech_ms = 60;        // consecutive loud frames that start speech
  int32_t min_silence_ms = 400;      // consecutive inactive frames that stop it
  int32_t onset_backtrack_ms = 100;  // how far the onset moves back over active frames
  int32_t prefix_padding_ms = 20;    // the start offset moves earlier by this
  int32_t suffix_padding_ms = 0;     // the stop offset moves later by this
  int32_t max_segment_ms = 30000;    // longer speech is cut here (a whole number of grid cells)

  // Throws InvalidArgument naming the field (and the range) for a value out of range.
  void validate() const;
  int64_t frame_samples() const { return int64_t{sample_rate} * frame_ms / 1000; }
};

enum class VadEventKind : uint8_t { kSpeechStarted, kSpeechStopped };
std::string_view vad_event_name(VadEventKind k);  // "speech_started", "speech_stopped"

struct VadEvent {
  VadEventKind kind = VadEventKind::kSpeechStarted;
  int64_t offset = 0;  // samples from the stream start, a multiple of grid_samples
  bool operator==(const VadEvent&) const = default;
};

// A voice segment [begin, end) in samples; both are multiples of grid_samples, begin < end.
struct VadSegment {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const VadSegment&) const = default;
};

// One stream. Events come in pairs, started then stopped, in order, never overlapping. An
// event is returned once its samples have arrived (a start once one grid cell after it has);
// its offset lies in the past by at most history_samples() beyond the sample where it was
// decided, so a streaming caller keeps that much audio. Not thread-safe (one stream, one owner).
class VoiceActivityDetector {
 public:
  explicit VoiceActivityDetector(const VadConfig& cfg = {});  // validates cfg

  // Analyses `samples` (mono, at the config's rate, nominally in [-1, 1]) after everything pushed
  // before. Throws InvalidArgument for a non-finite sample (before changing any state) and
  // FailedPrecondition after finish().
  std::vector<VadEvent> push(std::span<const float> samples);
  // End of stream: an open segment stops (at most at the last whole grid cell pushed), an
  // unconfirmed onset is dropped, a trailing partial frame is ignored. A second call returns {}.
  std::vector<VadEvent> finish();
  // Forgets the stream: the next push starts a new one at offset 0.
  void reset();

  const VadConfig& config() const { return cfg_; }
  int64_t samples_pushed() const { return samples_; }
  bool in_speech() const { return in_speech_; }
  double noise_floor_dbfs() const { return floor_db_; }  // after the last whole frame
  // The most an event's offset trails the end of the frame that decided it (a start: the
  // confirming run, the backtrack, the prefix padding; a stop: min_silence_ms), plus half a cell.
  int64_t history_samples() const;

 private:
  void process_frame(double energy_db);
  int64_t snap(int64_t sample) const;
  int64_t stop_offset() const;
  void release(std::vector<VadEvent>& out, bool at_end);

  VadConfig cfg_;
  int64_t frame_ = 0, grid_ = 0, window_ = 0, min_speech_ = 0, min_silence_ = 0, backtrack_ = 0;
  int64_t prefix_ = 0, suffix_ = 0, max_segment_ = 0;
  struct Biquad {  // transposed direct form II
    double b0 = 1, b1 = 0, b2 = 0, a1 = 0, a2 = 0, z1 = 0, z2 = 0;
    double step(double x) {
      const double y = b0 * x + z1;
      z1 = b1 * x - a1 * y + z2;
      z2 = b2 * x - a2 * y;
      return y;
    }
  };
  Biquad highpass_, lowpass_;
  // Stream state (reset() restores it, and the filters' z1, z2).
  double frame_sum_ = 0, floor_db_ = 0;
  int64_t frame_fill_ = 0, frames_ = 0, samples_ = 0;
  std::vector<int64_t> min_index_;  // [window_] ring: a monotonic queue of frame energies
  std::vector<double> min_value_;   // [window_]
  int64_t min_head_ = 0, min_size_ = 0;
  bool in_speech_ = false, finished_ = false;
  std::vector<bool> active_ring_;  // [min_speech_ + backtrack_] ring: was frame f active
  int64_t loud_run_start_ = 0, loud_run_ = 0;
  int64_t last_active_end_ = 0, quiet_run_ = 0, segment_start_ = 0, last_stop_ = 0;
  std::vector<VadEvent> pending_;  // decided, not yet returned (at most a few)
};

// The segments of a whole recording (one detector, push all, finish).
std::vector<VadSegment> detect_segments(std::span<const float> samples, const VadConfig& cfg = {});

}  // namespace mmrt::media

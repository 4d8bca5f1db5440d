// The energy VAD (media/vad.h) on synthetic signals made here: tones, noise bursts and a
// speech-like harmonic signal with a syllable envelope, with silences of known length; noise
// floor steps, DC, clipping, all silence, all speech, blips shorter than min_speech_ms, any
// chunking equal to one push, the 640-sample grid, bad configurations. The evaluation on real
// speech is test_vad_ref.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"
#include "media/vad.h"

using namespace mmrt;
using namespace mmrt::media;

namespace {

constexpr int64_t kRate = 16000;
constexpr int64_t kGrid = 640;  // 40 ms
int64_t ms(double v) {
  return static_cast<int64_t>(std::llround(v * kRate / 1000));
}

struct Rng {  // xorshift64*: the same noise on every platform
  uint64_t s;
  double uniform() {  // [-1, 1)
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return static_cast<double>((s * 2685821657736338717ull) >> 11) * 0x1p-52 - 1.0;
  }
};

double amp(double dbfs) {
  return std::pow(10.0, dbfs / 20);
}

// Signal builders: each adds to x[b, e) (sample indices) at an RMS of `dbfs`.
void add_noise(std::vector<float>& x, int64_t b, int64_t e, double dbfs, uint64_t seed) {
  Rng r{seed * 0x9E3779B97F4A7C15ull + 1};
  const double a = amp(dbfs) * std::sqrt(3.0);  // uniform [-a, a] has RMS a / sqrt(3)
  for (int64_t i = b; i < e; ++i) x[i] += static_cast<float>(a * r.uniform());
}
void add_tone(std::vector<float>& x, int64_t b, int64_t e, double hz, double dbfs) {
  const double a = amp(dbfs) * std::numbers::sqrt2;
  for (int64_t i = b; i < e; ++i)
    x[i] += static_cast<float>(a * std::sin(2 * std::numbers::pi * hz * (i - b) / kRate));
}
// A 140 Hz harmonic complex under a 4 Hz syllable envelope sin^2 (troughs of ~50 ms below
// -20 dB), starting in a trough: close enough to voiced speech for an energy detector.
void add_speechlike(std::vector<float>& x, int64_t b, int64_t e, double dbfs) {
  const double a = amp(dbfs) * 1.6;
  for (int64_t i = b; i < e; ++i) {
    const double t = static_cast<double>(i - b) / kRate;
    double v = 0;
    for (int k = 1; k <= 10; ++k) v += std::sin(2 * std::numbers::pi * 140 * k * t) / k;
    const double env = std::sin(std::numbers::pi * 4 * t);
    x[i] += static_cast<float>(a * 0.5 * v * env * env);
  }
}

std::vector<VadEvent> run(const std::vector<float>& x, const VadConfig& cfg,
                          const std::vector<int64_t>& chunks = {}) {
  VoiceActivityDetector vad(cfg);
  std::vector<VadEvent> all;
  size_t pos = 0, k = 0;
  while (pos < x.size()) {
    const size_t n =
        chunks.empty() ? x.size() : std::min<size_t>(chunks[k++ % chunks.size()], x.size() - pos);
    for (const VadEvent& ev : vad.push(std::span(x).subspan(pos, n))) all.push_back(ev);
    pos += n;
  }
  for (const VadEvent& ev : vad.finish()) all.push_back(ev);
  return all;
}

// Pairs, ordered, on the grid, non-empty, non-overlapping, within the stream.
::testing::AssertionResult well_formed(const std::vector<VadEvent>& ev, int64_t n) {
  int64_t last = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    const bool want_start = i % 2 == 0;
    if ((ev[i].kind == VadEventKind::kSpeechStarted) != want_start)
      return ::testing::AssertionFailure() << "event " << i << " is " << vad_event_name(ev[i].kind);
    if (ev[i].offset % kGrid != 0)
      return ::testing::AssertionFailure() << "event " << i << " at " << ev[i].offset;
    if (ev[i].offset < last || (!want_start && ev[i].offset == last) || ev[i].offset > n)
      return ::testing::AssertionFailure()
             << "event " << i << " at " << ev[i].offset << " after " << last << " (n " << n << ")";
    last = ev[i].offset;
  }
  if (ev.size() % 2 != 0) return ::testing::AssertionFailure() << "unpaired start";
  return ::testing::AssertionSuccess();
}

// Every segment within `tol` samples of the truth (begins within `begin_tol`), one for one.
void expect_segments(const std::vector<VadSegment>& got, const std::vector<VadSegment>& want,
                     int64_t tol = kGrid, int64_t begin_tol = -1) {
  ASSERT_EQ(got.size(), want.size());
  if (begin_tol < 0) begin_tol = tol;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::llabs(got[i].begin - want[i].begin), begin_tol)
        << "segment " << i << " begins at " << got[i].begin << ", truth " << want[i].begin;
    EXPECT_LE(std::llabs(got[i].end - want[i].end), tol)
        << "segment " << i << " ends at " << got[i].end << ", truth " << want[i].end;
  }
}

// Tones, a noise burst and speech-like sound over -60 dBFS noise, with known silences between.
struct Scene {
  std::vector<float> x;
  std::vector<VadSegment> truth;
};
Scene bursts_scene() {
  Scene s;
  s.x.assign(ms(9000), 0.0f);
  add_noise(s.x, 0, ms(9000), -60, 1);
  s.truth = {
      {ms(1000), ms(1600)}, {ms(2400), ms(3400)}, {ms(4600), ms(5000)}, {ms(6013), ms(7517)}};
  add_tone(s.x, s.truth[0].begin, s.truth[0].end, 440, -20);
  add_noise(s.x, s.truth[1].begin, s.truth[1].end, -25, 2);
  add_tone(s.x, s.truth[2].begin, s.truth[2].end, 1000, -30);
  add_speechlike(s.x, s.truth[3].begin, s.truth[3].end, -20);
  return s;
}

}  // namespace

TEST(Vad, DefaultsAreValid) {
  const VadConfig cfg;
  EXPECT_NO_THROW(cfg.validate());
  EXPECT_EQ(cfg.frame_samples(), 320);
  EXPECT_EQ(cfg.grid_samples, 640);
  EXPECT_EQ(cfg.grid_samples % cfg.frame_samples(), 0);
}

TEST(Vad, RefusesBadValuesNamingTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<std::string, std::function<void(VadConfig&)>>> bad = {
      {"sample_rate", [](VadConfig& c) { c.sample_rate = 4000; }},
      {"frame_ms", [](VadConfig& c) { c.frame_ms = 0; }},
      {"frame_ms", [](VadConfig& c) { c.sample_rate = 11025; }},  // 20 ms is 220.5 samples
      {"grid_samples", [](VadConfig& c) { c.grid_samples = 100; }},
      {"grid_samples", [](VadConfig& c) { c.grid_samples = 800; }},  // not a multiple of 320
      {"highpass_hz", [](VadConfig& c) { c.highpass_hz = -5; }},
      {"highpass_hz", [nan](VadConfig& c) { c.highpass_hz = nan; }},
      {"lowpass_hz", [](VadConfig& c) { c.lowpass_hz = 9000; }},
      {"lowpass_hz", [](VadConfig& c) { c.highpass_hz = 1600; }},  // lowpass 3000 < 2 * 1600
      {"energy_floor_dbfs", [](VadConfig& c) { c.energy_floor_dbfs = 3; }},
      {"floor_window_ms", [](VadConfig& c) { c.floor_window_ms = 50; }},
      {"start_db", [](VadConfig& c) { c.start_db = 0; }},
      {"start_db", [nan](VadConfig& c) { c.start_db = nan; }},
      {"stop_db", [](VadConfig& c) { c.stop_db = 9; }},  // above start_db
      {"min_speech_ms", [](VadConfig& c) { c.min_speech_ms = 10; }},
      {"min_silence_ms", [](VadConfig& c) { c.min_silence_ms = 20000; }},
      {"onset_backtrack_ms", [](VadConfig& c) { c.onset_backtrack_ms = -1; }},
      {"prefix_padding_ms", [](VadConfig& c) { c.prefix_padding_ms = 5000; }},
      {"suffix_padding_ms", [](VadConfig& c) { c.suffix_padding_ms = -20; }},
      {"max_segment_ms", [](VadConfig& c) { c.max_segment_ms = 500; }},
      {"max_segment_ms", [](VadConfig& c) { c.max_segment_ms = 30020; }},  // not whole cells
  };
  for (const auto& [field, mutate] : bad) {
    VadConfig cfg;
    mutate(cfg);
    try {
      VoiceActivityDetector vad(cfg);  // the constructor validates too
      ADD_FAILURE() << field << ": accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("VadConfig." + field), std::string::npos)
          << field << ": " << e.what();
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
  }
}

TEST(Vad, FindsBurstsSeparatedByKnownSilences) {
  const Scene s = bursts_scene();
  const std::vector<VadSegment> got = detect_segments(s.x);
  expect_segments(got, s.truth);
  EXPECT_TRUE(well_formed(run(s.x, {}), static_cast<int64_t>(s.x.size())));
  // Gaps shorter than min_silence_ms join; longer ones split.
  VadConfig joined;  // the gaps: 800, 1200, 1013 ms
  joined.min_silence_ms = 900;
  expect_segments(detect_segments(s.x, joined),
                  {{ms(1000), ms(3400)}, {ms(4600), ms(5000)}, {ms(6013), ms(7517)}});
}

TEST(Vad, ChunkedPushesGiveTheEventsOfOnePush) {
  Scene s = bursts_scene();
  add_noise(s.x, ms(8000), ms(9000), -35, 3);  // ends inside an (unconfirmed or open) segment
  const std::vector<VadEvent> whole = run(s.x, {});
  ASSERT_GE(whole.size(), 8u);
  const std::vector<std::vector<int64_t>> chunkings = {
      {1}, {7}, {160}, {319}, {320}, {321}, {640}, {641}, {4096}, {1, 999, 20, 3200, 5}, {100000}};
  for (const auto& c : chunkings) {
    EXPECT_EQ(run(s.x, {}, c), whole) << "chunks of " << c[0] << " (" << c.size() << " sizes)";
  }
}

TEST(Vad, EventsAreOnTheGridAndArriveWithTheirSamples) {
  // Bursts at arbitrary sample positions (not on frame or grid boundaries), several configs.
  VadConfig fine;
  fine.frame_ms = 10;
  fine.grid_samples = 320;
  fine.max_segment_ms = 2000;
  VadConfig padded;
  padded.prefix_padding_ms = 300;
  padded.suffix_padding_ms = 500;  // more than min_silence_ms: stops wait for their samples
  for (const VadConfig& cfg : {VadConfig{}, fine, padded}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      Rng r{seed};
      std::vector<float> x(static_cast<size_t>(ms(20000)), 0.0f);
      add_noise(x, 0, ms(20000), -55, seed);
      for (int64_t pos = ms(500); pos < ms(18000);) {
        const int64_t len = ms(150 + 600 * (r.uniform() + 1));
        add_tone(x, pos, pos + len, 300 + 200 * (r.uniform() + 1), -25 + 5 * r.uniform());
        pos += len + ms(200 + 500 * (r.uniform() + 1));
      }
      VoiceActivityDetector vad(cfg);
      std::vector<VadEvent> all;
      const int64_t grid = cfg.grid_samples, chunk = 777;
      for (size_t pos = 0; pos < x.size(); pos += chunk) {
        const size_t n = std::min<size_t>(chunk, x.size() - pos);
        for (const VadEvent& ev : vad.push(std::span(x).subspan(pos, n))) {
          EXPECT_EQ(ev.offset % grid, 0);
          const int64_t arrived = vad.samples_pushed();
          EXPECT_LE(ev.offset + (ev.kind == VadEventKind::kSpeechStarted ? grid : 0), arrived);
          EXPECT_LE(arrived - ev.offset, vad.history_samples() + chunk + grid)
              << vad_event_name(ev.kind) << " at " << ev.offset;
          all.push_back(ev);
        }
      }
      for (const VadEvent& ev : vad.finish()) all.push_back(ev);
      EXPECT_GE(all.size(), 6u) << "seed " << seed;
      // well_formed checks offset % 640; the fine config's grid is 320.
      for (size_t i = 0; i + 1 < all.size(); i += 2) {
        EXPECT_LT(all[i].offset, all[i + 1].offset);
        EXPECT_LE(all[i + 1].offset - all[i].offset, ms(cfg.max_segment_ms));
        if (i + 2 < all.size()) {
          EXPECT_LE(all[i + 1].offset, all[i + 2].offset);
        }
      }
      if (cfg.grid_samples == kGrid) {
        EXPECT_TRUE(well_formed(all, static_cast<int64_t>(x.size()))) << "seed " << seed;
      }
    }
  }
}

TEST(Vad, HysteresisAndOnsetBacktrack) {
  // Digital silence: the floor is energy_floor_dbfs (-70), loud from -62, active from -65.
  // Starts are exact here; a stop may be a cell late (the filters' decay after an abrupt end).
  std::vector<float> x(static_cast<size_t>(ms(8000)), 0.0f);
  add_tone(x, ms(1000), ms(1500), 1000, -20);
  add_tone(x, ms(1500), ms(2500), 1000, -63.5);  // active, not loud: the segment goes on
  add_tone(x, ms(4000), ms(5000), 1000, -63.5);  // alone: never starts one
  // A plosive: a 20 ms burst, 40 ms of silence, then the vowel. The onset is the burst.
  add_noise(x, ms(6000), ms(6020), -20, 11);
  add_tone(x, ms(6060), ms(7000), 300, -20);
  expect_segments(detect_segments(x), {{ms(1000), ms(2500)}, {ms(6000), ms(7000)}}, kGrid, 0);
  VadConfig no_hysteresis;
  no_hysteresis.stop_db = no_hysteresis.start_db;
  no_hysteresis.onset_backtrack_ms = 0;
  expect_segments(detect_segments(x, no_hysteresis), {{ms(1000), ms(1500)}, {ms(6040), ms(7000)}},
                  kGrid, 0);
  // A burst further back than onset_backtrack_ms (100) stays out.
  std::vector<float> y(static_cast<size_t>(ms(3000)), 0.0f);
  add_noise(y, ms(1000), ms(1020), -20, 12);
  add_tone(y, ms(1200), ms(2000), 300, -20);
  expect_segments(detect_segments(y), {{ms(1200), ms(2000)}}, kGrid, 0);
}

TEST(Vad, FollowsNoiseFloorChanges) {
  // -60 dBFS noise, -35 dBFS from 4 s to 16 s, then -60 again; tone bursts 20 dB above the
  // noise of their stretch. The step up is taken for speech until the floor window (3 s) has
  // seen only the louder noise; the step down is followed at once.
  std::vector<float> x(static_cast<size_t>(ms(22000)), 0.0f);
  add_noise(x, 0, ms(4000), -60, 4);
  add_noise(x, ms(4000), ms(16000), -35, 5);
  add_noise(x, ms(16000), ms(22000), -60, 6);
  const std::vector<VadSegment> bursts = {{ms(1000), ms(2000)},
                                          {ms(9000), ms(10000)},
                                          {ms(12000), ms(13500)},
                                          {ms(16500), ms(17500)},
                                          {ms(19000), ms(20000)}};
  for (const VadSegment& b : bursts)
    add_tone(x, b.begin, b.end, 700, b.begin > ms(4000) && b.begin < ms(16000) ? -15 : -40);
  const std::vector<VadSegment> got = detect_segments(x);
  ASSERT_EQ(got.size(), bursts.size() + 1);
  // The step: starts at 4 s, ends when the window has forgotten the quiet noise (about 7 s).
  EXPECT_LE(std::llabs(got[1].begin - ms(4000)), kGrid);
  EXPECT_GE(got[1].end, ms(6500));
  EXPECT_LE(got[1].end, ms(7000) + kGrid);
  expect_segments({got[0], got[2], got[3], got[4], got[5]}, bursts);
}

TEST(Vad, IgnoresDcOffsetAndSteps) {
  const Scene s = bursts_scene();
  const std::vector<VadSegment> want = detect_segments(s.x);
  expect_segments(want, s.truth);
  std::vector<float> dc = s.x;
  for (float& v : dc) v += 0.25f;  // a constant offset from the first sample
  EXPECT_EQ(detect_segments(dc), want);
  std::vector<float> step = s.x;  // an offset switched on in a silence, off in another
  for (int64_t i = ms(4013.3); i < ms(5713.7); ++i) step[i] += 0.3f;
  EXPECT_EQ(detect_segments(step), want);
  VadConfig unfiltered;  // without the high-pass the constant offset is all there is to hear
  unfiltered.highpass_hz = 0;
  EXPECT_TRUE(detect_segments(dc, unfiltered).empty());
}

TEST(Vad, FindsClippedSpeech) {
  std::vector<float> x(static_cast<size_t>(ms(6000)), 0.0f);
  add_noise(x, 0, ms(6000), -50, 7);
  const std::vector<VadSegment> truth = {{ms(1000), ms(2500)}, {ms(3500), ms(4700)}};
  add_speechlike(x, truth[0].begin, truth[0].end, 6);  // peaks ~4x full scale
  add_tone(x, truth[1].begin, truth[1].end, 500, 10);
  size_t clipped = 0;
  for (float& v : x)
    if (std::abs(v) > 1) v = std::copysign(1.0f, v), ++clipped;
  EXPECT_GT(clipped, static_cast<size_t>(ms(1000)));
  expect_segments(detect_segments(x), truth);
}

TEST(Vad, AllSilenceHasNoSpeech) {
  const std::vector<float> zeros(static_cast<size_t>(ms(20000)), 0.0f);
  EXPECT_TRUE(run(zeros, {}).empty());
  for (double level : {-80.0, -50.0, -20.0}) {
    std::vector<float> noise(zeros.size(), 0.0f);
    add_noise(noise, 0, ms(20000), level, 8);
    VoiceActivityDetector vad;
    EXPECT_TRUE(vad.push(noise).empty()) << level;
    // The floor: the quietest frame in the window, at most ~2 dB under the noise's RMS (after
    // the band-pass keeps 2.9 of its 8 kHz: -4.4 dB), or energy_floor_dbfs.
    const double band = level + 10 * std::log10((3000.0 - 80.0) / 8000.0);
    EXPECT_NEAR(vad.noise_floor_dbfs(), std::max(band - 1.0, -70.0), 1.5) << level;
    EXPECT_TRUE(vad.finish().empty()) << level;
  }
}

TEST(Vad, AllSpeechIsOneSegment) {
  // Speech-like sound from the first sample to the last (no silence at all).
  std::vector<float> x(static_cast<size_t>(ms(12010)), 0.0f);
  add_speechlike(x, 0, static_cast<int64_t>(x.size()), -20);
  const std::vector<VadSegment> got = detect_segments(x);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LE(got[0].begin, 2 * kGrid);
  EXPECT_EQ(got[0].end, static_cast<int64_t>(x.size()) / kGrid * kGrid);  // the last whole cell
  // Longer than max_segment_ms: cut there, or at the last active frame when the limit falls in
  // a syllable trough (then the next segment starts at the next syllable).
  std::vector<float> y(static_cast<size_t>(ms(70000)), 0.0f);
  add_speechlike(y, 0, static_cast<int64_t>(y.size()), -20);
  const std::vector<VadSegment> cut = detect_segments(y);
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_LE(cut[0].begin, 2 * kGrid);
  for (size_t i = 0; i < cut.size(); ++i) {
    EXPECT_LE(cut[i].end - cut[i].begin, ms(30000)) << i;
    if (i < 2) {
      EXPECT_GE(cut[i].end - cut[i].begin, ms(29700)) << i;  // no earlier cut
    }
    if (i > 0) {
      EXPECT_LE(cut[i].begin - cut[i - 1].end, ms(250)) << i;
    }
  }
  EXPECT_EQ(cut[2].end, ms(70000));
  VadConfig short_max;              // a limit that falls on syllable peaks: cut back to back
  short_max.max_segment_ms = 4120;  // 16.48 syllables
  const std::vector<VadSegment> peaks = detect_segments(y, short_max);
  ASSERT_GE(peaks.size(), 16u);
  EXPECT_EQ(peaks[0].end - peaks[0].begin, ms(4120));
  EXPECT_EQ(peaks[1].begin, peaks[0].end);
  for (const VadSegment& g : peaks) EXPECT_LE(g.end - g.begin, ms(4120));
}

TEST(Vad, IgnoresBlipsShorterThanMinSpeech) {
  // Clicks of 10 and 20 ms, 30 dB over the noise, at many phases against the 20 ms frames: each
  // makes at most 2 loud frames, fewer than min_speech_ms (3). (A click far louder than that also
  // makes its filters' decay loud in the next frame.)
  std::vector<float> x(static_cast<size_t>(ms(12000)), 0.0f);
  add_noise(x, 0, ms(12000), -60, 9);
  for (int k = 0; k < 20; ++k) {
    const int64_t b = ms(250 + 550 * k) + 37 * k;
    add_noise(x, b, b + ms(k % 2 == 0 ? 20 : 10), -30, 10 + k);
  }
  EXPECT_TRUE(detect_segments(x).empty());
  // A 100 ms burst is speech; so are the clicks when min_speech_ms is one frame.
  std::vector<float> y = x;
  add_tone(y, ms(11000), ms(11100), 600, -20);
  expect_segments(detect_segments(y), {{ms(11000), ms(11100)}});
  VadConfig one_frame;
  one_frame.min_speech_ms = 20;
  EXPECT_GE(detect_segments(x, one_frame).size(), 5u);
}

TEST(Vad, FinishResetAndBadSamples) {
  const Scene s = bursts_scene();
  const std::vector<VadEvent> want = run(s.x, {});
  VoiceActivityDetector vad;
  std::vector<VadEvent> got = vad.push(std::span(s.x).first(ms(4000)));
  // A non-finite sample is refused before anything changes.
  std::vector<float> bad(100, 0.0f);
  bad[42] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(vad.push(bad), InvalidArgument);
  bad[42] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(vad.push(bad), InvalidArgument);
  EXPECT_EQ(vad.samples_pushed(), ms(4000));
  for (const VadEvent& ev : vad.push(std::span(s.x).subspan(ms(4000)))) got.push_back(ev);
  for (const VadEvent& ev : vad.finish()) got.push_back(ev);
  EXPECT_EQ(got, want);
  EXPECT_TRUE(vad.finish().empty());
  try {
    vad.push(s.x);
    ADD_FAILURE() << "push after finish accepted";
  } catch (const FailedPrecondition& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  }
  vad.reset();
  EXPECT_EQ(vad.samples_pushed(), 0);
  got = vad.push(s.x);
  for (const VadEvent& ev : vad.finish()) got.push_back(ev);
  EXPECT_EQ(got, want);
}

TEST(Vad, StreamEndingInSpeech) {
  // Speech open at the end stops at the last whole grid cell; an onset in the last cell, too
  // short to have one cell after it, is dropped.
  std::vector<float> x(static_cast<size_t>(ms(3000) + 123), 0.0f);
  add_tone(x, ms(1000), static_cast<int64_t>(x.size()), 500, -20);
  expect_segments(detect_segments(x), {{ms(1000), ms(3000)}}, 0);
  VoiceActivityDetector vad;
  EXPECT_TRUE(vad.push(std::span(x).first(ms(2000))).size() == 1u);
  EXPECT_TRUE(vad.in_speech());
  const std::vector<VadEvent> end = vad.finish();
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0], (VadEvent{VadEventKind::kSpeechStopped, ms(2000)}));
  std::vector<float> late(static_cast<size_t>(ms(2000)), 0.0f);
  add_tone(late, ms(1970), ms(2000), 500, -20);  // two loud frames: not confirmed
  EXPECT_TRUE(detect_segments(late).empty());
  VadConfig quick;
  quick.min_speech_ms = 20;
  quick.prefix_padding_ms = 0;
  std::fill(late.begin(), late.end(), 0.0f);
  add_tone(late, ms(1980), ms(2000), 500, -20);  // confirmed, starts at 2000 ms: no cell after
  EXPECT_TRUE(detect_segments(late, quick).empty());
  add_tone(late, ms(1940), ms(1980), 500, -20);  // starts at 1960 ms: [1960, 2000)
  expect_segments(detect_segments(late, quick), {{ms(1960), ms(2000)}}, 0);
  EXPECT_TRUE(detect_segments(std::vector<float>(100, 0.5f)).empty());
}

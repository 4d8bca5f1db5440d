// A `mmrt verify` workload: what to send (request kinds with weights, camera-like frame streams),
// in which SLA classes, at what arrival process, and the rules each class is judged by. Read
// from a JSON or YAML file (docs/verify.md documents every field), or the built-in default; the
// whole schedule is generated from the seed before the run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mmrt::verify {

struct ImageSource {
  std::vector<std::pair<int, int>> sizes;  // synthetic images of these sizes (w, h), or
  std::string dir;                         // real images from this folder (.jpg .jpeg .png .webp)
};

// One kind of request in the Poisson mix.
struct RequestKind {
  std::string kind;  // "text" | "image" | "repeat_image"
  double weight = 1;
  int prompt_words = 32;  // text length of the question / prompt
  int max_tokens = 24;
  ImageSource images;     // image and repeat_image
  int turns = 3;          // repeat_image: turns of one conversation, all with the same image
  double turn_gap_s = 2;  // repeat_image: time between its turns
};

// A constant-rate stream: one request per frame at `fps` (camera-like), each with an image.
struct FrameStream {
  std::string name;
  double fps = 5;
  std::string sla_class;
  ImageSource images;
  int distinct_frames = 0;  // 0: every frame a new image; n: the stream cycles n images
  int prompt_words = 8;
  int max_tokens = 8;
  double start_s = 0;  // from the run's start
};

// Thresholds (ms) of one metric; absent quantiles are not judged.
struct Thresholds {
  std::optional<double> p50, p90, p99;
  // The per-request budget: the highest quantile's threshold (a request over it is a miss).
  std::optional<double> budget() const { return p99 ? p99 : p90 ? p90 : p50; }
  bool any() const { return p50 || p90 || p99; }
};

struct ClassRules {
  std::string name;   // an SLA class of the server ("all" for the overall rules)
  double weight = 0;  // share of the Poisson mix
  Thresholds ttft, tpot, e2e;
  std::optional<double> itl_jitter_ms;  // P99 - P50 of inter-token gaps
  bool refusals_ok = false;             // refusals are not violations for this class
};

struct Workload {
  std::string name = "default-mixed";
  uint64_t seed = 1;
  double duration_s = 300;
  double warmup_s = 10;       // excluded from the verdict
  double rate = 0;            // Poisson arrivals per second across `requests` (0: none)
  double confidence = 0.95;   // of every percentile claim
  double timeout_s = 30;      // per request; a timeout is a violation
  int k = 3;                  // k consecutive misses in a frame stream fail the run
  double max_lag_ms = 10;     // P99 of the generator's own lag over this: INVALID
  double steady_ratio = 1.5;  // second-half P50 over first-half P50 (TTFT, e2e) above this: INVALID
  double steady_min_delta_ms = 20;     // ... and more than this many ms apart
  double baseline_tolerance_pct = 25;  // P50/P99/jitter deltas allowed against a baseline
  std::vector<RequestKind> requests;
  std::vector<FrameStream> streams;
  std::vector<ClassRules> classes;              // Poisson class mix and per-class rules
  std::optional<ClassRules> overall;            // rules over every request
  std::vector<std::string> preflight_required;  // empty: the default set
};

// Parses a workload (JSON text, or YAML when `yaml`). Unknown fields and out-of-range values are
// InvalidArgument naming `origin` and the field path: a gate must not run on a typo.
Workload parse_workload(const std::string& text, bool yaml, const std::string& origin);
// The checks across fields (something to send, warm-up shorter than the run, stream names and
// classes, the schedule's size at most 2,000,000 requests), for a workload changed after parsing
// (command-line overrides). InvalidArgument naming `origin` and the field.
void validate_workload(const Workload& w, const std::string& origin);
// Reads FILE (.json, .yaml or .yml; at most 4 MiB).
Workload load_workload(const std::string& path);
// The default mixed text + image workload at `rate` requests per second, with the server's
// default classes (platinum / gold / silver) and their TTFT budgets as rules.
Workload default_workload(double rate);
// The workload back as JSON (stored in the result and in baselines).
nlohmann::json workload_json(const Workload& w);

// One request of the schedule.
struct Planned {
  double t_s = 0;             // scheduled send time from the run's start
  std::string kind;           // "text" | "image" | "repeat_image" | "frame"
  std::string sla_class;      // empty: the server's default
  std::string stream;         // frame streams: the stream's name
  int64_t frame = -1;         // frame streams: the frame number
  int kind_index = -1;        // index into Workload::requests (-1 for frames)
  int64_t conversation = -1;  // repeat_image: the conversation; turn its turn
  int turn = 0;
  uint64_t seed = 0;             // content seed (prompt words, synthetic image)
  int image_w = 0, image_h = 0;  // synthetic image size (0: none or from a folder)
  int64_t image_index = -1;      // index into the folder's sorted files
  int max_tokens = 0, prompt_words = 0;
  bool warmup = false;  // scheduled before warmup_s
};

// Every request of the run, sorted by time, from the seed alone. `image_counts[i]` is the number
// of files of Workload::requests[i]'s folder (streams: image_counts[requests.size() + j]).
std::vector<Planned> make_schedule(const Workload& w, const std::vector<int64_t>& image_counts);

}  // namespace mmrt::verify

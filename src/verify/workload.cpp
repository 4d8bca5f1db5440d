#include "verify/workload.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/error.h"
#include "io/file.h"
#include "io/json_fields.h"

namespace mmrt::verify {
namespace {

using nlohmann::json;

constexpr int kMaxYamlDepth = 64;
constexpr int64_t kMaxScheduled = 2'000'000;
constexpr int64_t kMaxYamlNodes = 100'000;

// YAML scalars become the JSON types they spell (null, booleans, integers, numbers), else
// strings. Aliases are expanded, so the number of nodes is bounded (a few aliases of aliases
// would otherwise expand to billions), and so is the depth.
struct YamlBudget {
  int64_t nodes = 0;
  const std::string& origin;
};

json yaml_to_json(const YAML::Node& n, int depth, YamlBudget& b) {
  if (depth > kMaxYamlDepth)
    throw InvalidArgument(b.origin + ": nests deeper than " + std::to_string(kMaxYamlDepth));
  if (++b.nodes > kMaxYamlNodes)
    throw InvalidArgument(b.origin + ": more than " + std::to_string(kMaxYamlNodes) +
                          " values (after expanding aliases)");
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& e : n) a.push_back(yaml_to_json(e, depth + 1, b));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar())
          throw InvalidArgument(b.origin + ": a mapping key must be a plain string");
        o[kv.first.Scalar()] = yaml_to_json(kv.second, depth + 1, b);
      }
      return o;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "~" || s == "null") return nullptr;
      if (s == "true") return true;
      if (s == "false") return false;
      json v = json::parse(s, nullptr, false);
      if (!v.is_discarded() && v.is_number()) return v;
      return s;
    }
  }
  return nullptr;
}

// Strict reading of one JSON object: typed getters with ranges; fields nobody asked for are an
// error at done().
class Obj {
 public:
  Obj(const json& j, std::string path, const std::string& origin)
      : j_(j), path_(std::move(path)), origin_(origin) {
    if (!j.is_object()) fail("", "must be an object");
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InvalidArgument(origin_ + ": " + name(key) + " " + what);
  }
  std::string name(const std::string& key) const {
    return path_.empty() ? key : key.empty() ? path_ : path_ + "." + key;
  }
  const json* find(const std::string& key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  double num(const std::string& key, double def, double lo, double hi) {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < lo ||
        v->get<double>() > hi)
      fail(key,
           "must be a number in " + fmt(lo) + ".." + fmt(hi) + ", got " + io::json_excerpt(*v));
    return v->get<double>();
  }
  std::optional<double> opt_num(const std::string& key, double lo, double hi) {
    if (!j_.contains(key) || j_[key].is_null()) {
      seen_.insert(key);
      return std::nullopt;
    }
    return num(key, 0, lo, hi);
  }
  int64_t integer(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
      fail(key, "must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
                    ", got " + io::json_excerpt(*v));
    return v->get<int64_t>();
  }
  bool boolean(const std::string& key, bool def) {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + io::json_excerpt(*v));
    return v->get<bool>();
  }
  std::string str(const std::string& key, const std::string& def) {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_string() || v->get<std::string>().size() > 4096)
      fail(key, "must be a string (at most 4096 bytes), got " + io::json_excerpt(*v));
    return v->get<std::string>();
  }
  const json& array(const std::string& key, size_t max) {
    const json* v = find(key);
    if (!v) return empty_;
    if (!v->is_array() || v->size() > max)
      fail(key, "must be a list of at most " + std::to_string(max) + " entries");
    return *v;
  }
  void done() const {
    for (const auto& [k, v] : j_.items())
      if (!seen_.count(k)) fail(k, "is not a workload field (see docs/verify.md)");
  }
  const std::string& path() const { return path_; }
  const std::string& origin() const { return origin_; }

 private:
  static std::string fmt(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return b;
  }
  const json& j_;
  std::string path_;
  const std::string& origin_;
  std::set<std::string> seen_;
  const json empty_ = json::array();
};

ImageSource read_images(Obj& o) {
  ImageSource s;
  s.dir = o.str("images_dir", "");
  const json& sizes = o.array("image_sizes", 64);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const json& e = sizes[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        e[0].get<int64_t>() < 16 || e[1].get<int64_t>() < 16 || e[0].get<int64_t>() > 8192 ||
        e[1].get<int64_t>() > 8192)
      o.fail("image_sizes[" + std::to_string(i) + "]",
             "must be [width, height] with sides in 16..8192");
    s.sizes.emplace_back(e[0].get<int>(), e[1].get<int>());
  }
  if (!s.dir.empty() && !s.sizes.empty())
    o.fail("images_dir", "and image_sizes are exclusive: give one");
  return s;
}

Thresholds read_thresholds(Obj& parent, const std::string& key) {
  Thresholds t;
  const json* v = parent.find(key);
  if (!v) return t;
  Obj o(*v, parent.name(key), parent.origin());
  t.p50 = o.opt_num("p50", 0.001, 3.6e6);
  t.p90 = o.opt_num("p90", 0.001, 3.6e6);
  t.p99 = o.opt_num("p99", 0.001, 3.6e6);
  o.done();
  return t;
}

ClassRules read_rules(Obj& o, const std::string& name, bool with_weight) {
  ClassRules r;
  r.name = name;
  if (with_weight) r.weight = o.num("weight", 0, 0, 1e6);
  r.ttft = read_thresholds(o, "ttft_ms");
  r.tpot = read_thresholds(o, "tpot_ms");
  r.e2e = read_thresholds(o, "e2e_ms");
  r.itl_jitter_ms = o.opt_num("itl_jitter_ms", 0.001, 3.6e6);
  r.refusals_ok = o.boolean("refusals_ok", false);
  o.done();
  return r;
}

// splitmix64's finaliser: distinct streams and frames get unrelated content seeds.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<Planned> poisson_part(const Workload& w, const std::vector<int64_t>& counts,
                                  std::mt19937_64& rng);

}  // namespace

void validate_workload(const Workload& w, const std::string& origin) {
  auto bad = [&](const std::string& field, const std::string& what) {
    throw InvalidArgument(origin + ": " + field + " " + what);
  };
  std::set<std::string> names;
  for (const auto& c : w.classes)
    if (c.name == "all") bad("classes.all", "is reserved for the overall rules: use \"overall\"");
  for (const auto& f : w.streams) {
    if (!names.insert(f.name).second) bad("streams", "has two streams named '" + f.name + "'");
    if (!w.classes.empty() && !f.sla_class.empty() &&
        std::none_of(w.classes.begin(), w.classes.end(),
                     [&](const ClassRules& c) { return c.name == f.sla_class; }))
      bad("streams." + f.name + ".class",
          "'" + f.sla_class + "' is not one of the workload's classes");
  }
  if (w.rate > 0 && w.requests.empty()) bad("rate", "needs a requests list to draw from");
  if (w.rate == 0 && w.streams.empty())
    bad("rate", "is 0 and there are no streams: nothing to send");
  if (w.warmup_s >= w.duration_s) bad("warmup_s", "must be shorter than duration_s");
  double total = 0;
  for (const auto& k : w.requests) total += k.weight;
  if (w.rate > 0 && total <= 0) bad("requests", "weights must not all be 0");
  // The schedule is built before the run: bound it (a Poisson count past its mean by 10 sigma
  // and every repeat_image turn included).
  int turns = 1;
  for (const auto& k : w.requests)
    if (k.kind == "repeat_image") turns = std::max(turns, k.turns);
  const double mean = w.rate * w.duration_s;
  double expected = (mean + 10 * std::sqrt(mean)) * turns;
  for (const auto& f : w.streams) expected += f.fps * w.duration_s;
  if (expected > static_cast<double>(kMaxScheduled))
    bad("rate", "and duration_s schedule about " + std::to_string(static_cast<int64_t>(expected)) +
                    " requests; at most " + std::to_string(kMaxScheduled) + " fit one run");
}

Workload parse_workload(const std::string& text, bool yaml, const std::string& origin) {
  json j;
  if (yaml) {
    try {
      YamlBudget budget{.origin = origin};
      j = yaml_to_json(YAML::Load(text), 0, budget);
    } catch (const YAML::Exception& e) {
      throw InvalidArgument(origin + ": not valid YAML: " + e.what());
    }
  } else {
    try {
      j = io::parse_json_object(text, origin);
    } catch (const Error& e) {
      throw InvalidArgument(e.what());
    }
  }
  Obj o(j, "", origin);
  Workload w;
  w.name = o.str("name", "workload");
  w.seed = static_cast<uint64_t>(o.integer("seed", 1, 0, INT64_MAX));
  w.duration_s = o.num("duration_s", w.duration_s, 1, 86400);
  w.warmup_s = o.num("warmup_s", w.warmup_s, 0, 3600);
  w.rate = o.num("rate", 0, 0, 10000);
  w.confidence = o.num("confidence", w.confidence, 0.5, 0.9999);
  w.timeout_s = o.num("timeout_s", w.timeout_s, 0.1, 3600);
  w.k = static_cast<int>(o.integer("k", w.k, 1, 1000));
  w.max_lag_ms = o.num("max_generator_lag_ms", w.max_lag_ms, 0.01, 60000);
  w.steady_ratio = o.num("steady_state_ratio", w.steady_ratio, 1, 100);
  w.steady_min_delta_ms = o.num("steady_state_min_delta_ms", w.steady_min_delta_ms, 0, 3.6e6);
  w.baseline_tolerance_pct = o.num("baseline_tolerance_pct", w.baseline_tolerance_pct, 0, 10000);
  const json& reqs = o.array("requests", 64);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Obj r(reqs[i], "requests[" + std::to_string(i) + "]", origin);
    RequestKind k;
    k.kind = r.str("kind", "");
    if (k.kind != "text" && k.kind != "image" && k.kind != "repeat_image")
      r.fail("kind", "must be text, image or repeat_image, got '" + k.kind + "'");
    k.weight = r.num("weight", 1, 0, 1e6);
    k.prompt_words = static_cast<int>(r.integer("prompt_words", k.prompt_words, 1, 100000));
    k.max_tokens = static_cast<int>(r.integer("max_tokens", k.max_tokens, 1, 100000));
    k.images = read_images(r);
    k.turns = static_cast<int>(r.integer("turns", k.turns, 1, 100));
    k.turn_gap_s = r.num("turn_gap_s", k.turn_gap_s, 0, 3600);
    if (k.kind != "text" && k.images.dir.empty() && k.images.sizes.empty())
      k.images.sizes = {{448, 336}};
    r.done();
    w.requests.push_back(k);
  }
  const json& streams = o.array("streams", 64);
  for (size_t i = 0; i < streams.size(); ++i) {
    Obj s(streams[i], "streams[" + std::to_string(i) + "]", origin);
    FrameStream f;
    f.name = s.str("name", "stream-" + std::to_string(i));
    f.fps = s.num("fps", f.fps, 0.01, 240);
    f.sla_class = s.str("class", "");
    f.images = read_images(s);
    if (f.images.dir.empty() && f.images.sizes.empty()) f.images.sizes = {{320, 240}};
    f.distinct_frames = static_cast<int>(s.integer("distinct_frames", 0, 0, 1'000'000));
    f.prompt_words = static_cast<int>(s.integer("prompt_words", f.prompt_words, 1, 100000));
    f.max_tokens = static_cast<int>(s.integer("max_tokens", f.max_tokens, 1, 100000));
    f.start_s = s.num("start_s", 0, 0, 86400);
    s.done();
    w.streams.push_back(f);
  }
  if (const json* c = o.find("classes")) {
    if (!c->is_object() || c->size() > 32)
      o.fail("classes", "must map class names to rules (at most 32)");
    for (const auto& [name, v] : c->items()) {
      Obj r(v, "classes." + name, origin);
      w.classes.push_back(read_rules(r, name, true));
    }
  }
  if (const json* a = o.find("overall")) {
    Obj r(*a, "overall", origin);
    w.overall = read_rules(r, "all", false);
  }
  const json& req = o.array("preflight_required", 64);
  for (const auto& e : req) {
    if (!e.is_string()) o.fail("preflight_required", "must be a list of check names");
    w.preflight_required.push_back(e.get<std::string>());
  }
  o.done();
  validate_workload(w, origin);
  return w;
}

Workload load_workload(const std::string& path) {
  const std::string text = io::read_file(path, {.what = "workload file", .max_bytes = 4u << 20});
  const bool yaml = path.ends_with(".yaml") || path.ends_with(".yml");
  if (!yaml && !path.ends_with(".json"))
    throw InvalidArgument("workload file '" + path + "' must end in .json, .yaml or .yml");
  return parse_workload(text, yaml, path);
}

Workload default_workload(double rate) {
  Workload w;
  w.name = "default-mixed";
  w.rate = rate;
  w.requests = {
      {.kind = "text", .weight = 6, .prompt_words = 48, .max_tokens = 24},
      {.kind = "image",
       .weight = 3,
       .prompt_words = 12,
       .max_tokens = 24,
       .images = {.sizes = {{224, 224}, {448, 336}}}},
      {.kind = "repeat_image",
       .weight = 1,
       .prompt_words = 12,
       .max_tokens = 16,
       .images = {.sizes = {{448, 336}}},
       .turns = 3,
       .turn_gap_s = 2},
  };
  // The server's default classes and their TTFT budgets (engine/sla.cpp).
  w.classes = {
      {.name = "platinum", .weight = 0.2, .ttft = {.p50 = 150, .p99 = 300}, .tpot = {.p99 = 50}},
      {.name = "gold", .weight = 0.3, .ttft = {.p50 = 400, .p99 = 800}, .tpot = {.p99 = 100}},
      {.name = "silver", .weight = 0.5, .ttft = {.p99 = 5000}},
  };
  return w;
}

nlohmann::json workload_json(const Workload& w) {
  auto th = [](const Thresholds& t) {
    json o = json::object();
    if (t.p50) o["p50"] = *t.p50;
    if (t.p90) o["p90"] = *t.p90;
    if (t.p99) o["p99"] = *t.p99;
    return o;
  };
  auto rules = [&](const ClassRules& r, bool weight) {
    json o = {{"ttft_ms", th(r.ttft)},
              {"tpot_ms", th(r.tpot)},
              {"e2e_ms", th(r.e2e)},
              {"refusals_ok", r.refusals_ok}};
    if (weight) o["weight"] = r.weight;
    if (r.itl_jitter_ms) o["itl_jitter_ms"] = *r.itl_jitter_ms;
    return o;
  };
  auto images = [](json& o, const ImageSource& s) {
    if (!s.dir.empty()) o["images_dir"] = s.dir;
    if (!s.sizes.empty()) {
      o["image_sizes"] = json::array();
      for (auto [x, y] : s.sizes) o["image_sizes"].push_back({x, y});
    }
  };
  json j = {{"name", w.name},
            {"seed", w.seed},
            {"duration_s", w.duration_s},
            {"warmup_s", w.warmup_s},
            {"rate", w.rate},
            {"confidence", w.confidence},
            {"timeout_s", w.timeout_s},
            {"k", w.k},
            {"max_generator_lag_ms", w.max_lag_ms},
            {"steady_state_ratio", w.steady_ratio},
            {"steady_state_min_delta_ms", w.steady_min_delta_ms},
            {"baseline_tolerance_pct", w.baseline_tolerance_pct},
            {"requests", json::array()},
            {"streams", json::array()},
            {"classes", json::object()}};
  for (const auto& k : w.requests) {
    json o = {{"kind", k.kind},
              {"weight", k.weight},
              {"prompt_words", k.prompt_words},
              {"max_tokens", k.max_tokens}};
    images(o, k.images);
    if (k.kind == "repeat_image") {
      o["turns"] = k.turns;
      o["turn_gap_s"] = k.turn_gap_s;
    }
    j["requests"].push_back(o);
  }
  for (const auto& f : w.streams) {
    json o = {{"name", f.name},
              {"fps", f.fps},
              {"class", f.sla_class},
              {"distinct_frames", f.distinct_frames},
              {"prompt_words", f.prompt_words},
              {"max_tokens", f.max_tokens},
              {"start_s", f.start_s}};
    images(o, f.images);
    j["streams"].push_back(o);
  }
  for (const auto& c : w.classes) j["classes"][c.name] = rules(c, true);
  if (w.overall) j["overall"] = rules(*w.overall, false);
  if (!w.preflight_required.empty()) j["preflight_required"] = w.preflight_required;
  return j;
}

std::vector<Planned> make_schedule(const Workload& w, const std::vector<int64_t>& image_counts) {
  std::mt19937_64 rng(w.seed);
  std::vector<Planned> out = poisson_part(w, image_counts, rng);
  for (size_t s = 0; s < w.streams.size(); ++s) {
    const FrameStream& f = w.streams[s];
    const size_t ci = w.requests.size() + s;
    const int64_t files = ci < image_counts.size() ? image_counts[ci] : 0;
    const auto frames = static_cast<int64_t>(std::floor((w.duration_s - f.start_s) * f.fps));
    for (int64_t i = 0; i < frames; ++i) {
      Planned p;
      p.t_s = f.start_s + static_cast<double>(i) / f.fps;
      p.kind = "frame";
      p.sla_class = f.sla_class;
      p.stream = f.name;
      p.frame = i;
      const int64_t content = f.distinct_frames > 0 ? i % f.distinct_frames : i;
      p.seed = mix(mix(w.seed ^ 0x5354524541ull) ^ s) ^ static_cast<uint64_t>(content);
      if (!f.images.sizes.empty()) {
        const auto& sz = f.images.sizes[static_cast<size_t>(content) % f.images.sizes.size()];
        p.image_w = sz.first;
        p.image_h = sz.second;
      } else if (files > 0) {
        p.image_index = content % files;
      }
      p.max_tokens = f.max_tokens;
      p.prompt_words = f.prompt_words;
      out.push_back(p);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Planned& a, const Planned& b) { return a.t_s < b.t_s; });
  for (auto& p : out) p.warmup = p.t_s < w.warmup_s;
  return out;
}

namespace {

std::vector<Planned> poisson_part(const Workload& w, const std::vector<int64_t>& counts,
                                  std::mt19937_64& rng) {
  std::vector<Planned> out;
  if (w.rate <= 0) return out;
  std::exponential_distribution<double> gap(w.rate);
  std::vector<double> kw, cw;
  for (const auto& k : w.requests) kw.push_back(k.weight);
  for (const auto& c : w.classes) cw.push_back(c.weight);
  std::discrete_distribution<int> pick_kind(kw.begin(), kw.end());
  const bool classes = std::any_of(cw.begin(), cw.end(), [](double x) { return x > 0; });
  std::discrete_distribution<int> pick_class(cw.begin(), cw.end());
  int64_t conversation = 0;
  const size_t cap = 2'000'000 * 4;  // parse_workload bounds the expected count far below this
  for (double t = gap(rng); t < w.duration_s; t += gap(rng)) {
    if (out.size() >= cap)
      throw InvalidArgument("the schedule passed " + std::to_string(cap) + " requests");
    const int ki = pick_kind(rng);
    const RequestKind& k = w.requests[static_cast<size_t>(ki)];
    Planned p;
    p.kind = k.kind;
    p.kind_index = ki;
    p.sla_class = classes ? w.classes[static_cast<size_t>(pick_class(rng))].name : "";
    p.seed = rng();
    p.max_tokens = k.max_tokens;
    p.prompt_words = k.prompt_words;
    const int64_t files =
        static_cast<size_t>(ki) < counts.size() ? counts[static_cast<size_t>(ki)] : 0;
    if (k.kind != "text") {
      if (!k.images.sizes.empty()) {
        const auto& sz = k.images.sizes[rng() % k.images.sizes.size()];
        p.image_w = sz.first;
        p.image_h = sz.second;
      } else if (files > 0) {
        p.image_index = static_cast<int64_t>(rng() % static_cast<uint64_t>(files));
      }
    }
    const int turns = k.kind == "repeat_image" ? k.turns : 1;
    if (k.kind == "repeat_image") p.conversation = conversation++;
    for (int turn = 0; turn < turns; ++turn) {
      Planned q = p;
      q.turn = turn;
      q.t_s = t + turn * k.turn_gap_s;
      if (q.t_s >= w.duration_s) break;
      out.push_back(q);
    }
  }
  return out;
}

}  // namespace
}  // namespace mmrt::verify

#include "cluster/load_gauges.h"

#include <nats/nats.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "cluster/nats_link.h"
#include "cluster/wire_fields.h"
#include "core/clock.h"
#include "core/error.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

constexpr size_t kMaxGaugeBytes = 4096;
constexpr size_t kMaxQuoteClasses = 16;

// A quote's bounds, one rule for both ends: prices (ns) finite in [0, 1e12]; at most 16 classes,
// each a name of 1-64 bytes, ahead_ms in [0, 1e9], floor_ms in [0, ahead_ms], bias in (0, 100]
// (NaN fails every comparison).
bool price_ok(double ns) {
  return ns >= 0 && ns <= 1e12;
}
bool class_ok(const engine::Quote::Class& c) {
  return !c.name.empty() && c.name.size() <= 64 && c.ahead_ms >= 0 && c.ahead_ms <= 1e9 &&
         c.floor_ms >= 0 && c.floor_ms <= c.ahead_ms && c.bias > 0 && c.bias <= 100;
}

// What parse_quote takes: the first 16 classes in bounds (one out of bounds would make the
// router drop the whole quote); null when a price is not (a cost model gone wrong: no quote
// rather than a wrong one).
json quote_json(const engine::Quote& q) {
  if (!price_ok(q.token_ns) || !price_ok(q.token_idle_ns) || !price_ok(q.patch_ns) ||
      !price_ok(q.item_ns) || !price_ok(q.pair_ns))
    return nullptr;
  json classes = json::array();
  for (const auto& c : q.classes)
    if (classes.size() < kMaxQuoteClasses && class_ok(c))
      classes.push_back({c.name, c.ahead_ms, c.bias, c.floor_ms});
  return {{"token_ns", q.token_ns}, {"token_idle_ns", q.token_idle_ns},
          {"patch_ns", q.patch_ns}, {"item_ns", q.item_ns},
          {"pair_ns", q.pair_ns},   {"classes", std::move(classes)}};
}

engine::Quote parse_quote(const json& j) {
  const WireFields f(j, "load gauge: quote");
  engine::Quote q;
  q.token_ns = f.number("token_ns", 0, 1e12);
  q.token_idle_ns = f.number("token_idle_ns", 0, 1e12);
  q.patch_ns = f.number("patch_ns", 0, 1e12);
  q.item_ns = f.number("item_ns", 0, 1e12);
  q.pair_ns = f.number_or("pair_ns", 0, 0, 1e12);  // absent from an older worker's gauge
  const json& cs = f.get("classes");
  if (!cs.is_array() || cs.size() > kMaxQuoteClasses)
    f.fail("'classes' is not a list of at most 16");
  for (const json& c : cs) {
    if (!c.is_array() || c.size() != 4 || !c[0].is_string() || !c[1].is_number() ||
        !c[2].is_number() || !c[3].is_number())
      f.fail("a class is not [name, ahead_ms, bias, floor_ms]");
    engine::Quote::Class qc{c[0].get<std::string>(), c[1].get<double>(), c[2].get<double>(),
                            c[3].get<double>()};
    if (!class_ok(qc)) f.fail("class '" + qc.name.substr(0, 64) + "' is out of bounds");
    q.classes.push_back(std::move(qc));
  }
  return q;
}

}  // namespace

std::string to_json(const LoadGauge& g) {
  json j{{"id", g.id},
         {"seq", g.seq},
         {"waiting", g.waiting},
         {"running", g.running},
         {"in_flight", g.in_flight},
         {"kv_usage", g.kv_usage}};
  if (!g.quote.classes.empty())
    if (json q = quote_json(g.quote); !q.is_null()) j["quote"] = std::move(q);
  return j.dump();
}

LoadGauge parse_load_gauge(std::string_view s) {
  if (s.size() > kMaxGaugeBytes) throw FormatError("load gauge: over 4 KiB");
  const json j = WireFields::parse(s, 0, "load gauge");
  const WireFields f(j, "load gauge");
  LoadGauge g;
  g.id = f.text("id");
  if (g.id.empty()) f.fail("'id' is empty");
  g.seq = f.count("seq");
  g.waiting = f.count("waiting");
  g.running = f.count("running");
  g.in_flight = f.count("in_flight");
  g.kv_usage = f.number("kv_usage", 0, 1);
  // A quote out of bounds loses the quote, not the load: the router then takes the worker as
  // one without a quote (it may try it; never refuses for it).
  if (const json* q = f.find("quote")) {
    try {
      g.quote = parse_quote(*q);
    } catch (const FormatError&) {
      g.quote = {};
    }
  }
  return g;
}

// ---- publisher ----

struct GaugePublisher::Impl {
  natsConnection* nc = nullptr;
  std::string subject, id;
  int64_t period_ms = 250;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::optional<LoadGauge> latest;
  bool fresh = false;  // latest not yet published
  std::thread thread;
};

GaugePublisher::GaugePublisher(const std::string& url, std::string id, int64_t period_ms)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.nc = nats_connect(url, "publishing load gauges");
  m.id = std::move(id);
  m.subject = kLoadSubject + m.id;
  m.period_ms = period_ms;
  m.thread = std::thread([&m] {
    int64_t seq = 0;
    std::unique_lock<std::mutex> lk(m.mu);
    for (;;) {
      // Only samples not yet sent: a worker that stops sampling goes stale at the router,
      // rather than looking fresh with an old sample under a new number.
      m.cv.wait(lk, [&] { return m.stop || m.fresh; });
      if (m.stop) break;
      m.fresh = false;
      if (!m.latest) continue;
      LoadGauge g = *m.latest;
      g.id = m.id;
      g.seq = ++seq;
      lk.unlock();
      // Buffered while disconnected (libnats' reconnect buffer), dropped past it: a gauge is
      // superseded by the next one anyway.
      natsConnection_PublishString(m.nc, m.subject.c_str(), to_json(g).c_str());
      lk.lock();
    }
  });
}

GaugePublisher::~GaugePublisher() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
  natsConnection_Destroy(impl_->nc);
}

void GaugePublisher::set(const LoadGauge& g) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->latest = g;
    impl_->fresh = true;
  }
  impl_->cv.notify_all();
}

// ---- board ----

struct GaugeBoard::Impl {
  std::unique_ptr<NatsListener> nats;
  std::function<bool(const std::string&)> known;
  mutable std::mutex mu;
  struct Entry {
    LoadGauge g;
    int64_t at_ns = 0;
  };
  std::map<std::string, Entry> latest;
  std::atomic<int64_t> gaps{0};
  IgnoredLog ignored{"a load gauge"};

  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto& m = *static_cast<Impl*>(closure);
    const std::string subject = natsMsg_GetSubject(msg);
    const std::string_view data(natsMsg_GetData(msg),
                                static_cast<size_t>(natsMsg_GetDataLength(msg)));
    LoadGauge g;
    try {
      g = parse_load_gauge(data);
    } catch (const std::exception& e) {
      m.ignored.add(subject, e.what());
      natsMsg_Destroy(msg);
      return;
    }
    natsMsg_Destroy(msg);
    if (subject != kLoadSubject + g.id)
      return m.ignored.add(subject, "its id '" + g.id + "' is not its subject's");
    if (!m.known(g.id)) return m.ignored.add(subject, "no worker '" + g.id + "' is registered");
    std::lock_guard<std::mutex> lk(m.mu);
    Entry& e = m.latest[g.id];
    // A restarted worker starts again at 1 (it has a new id: ids carry the process id).
    if (e.at_ns != 0 && g.seq <= e.g.seq) {
      m.ignored.add(subject, "an old sequence number");
      return;
    }
    if (e.at_ns != 0 && g.seq > e.g.seq + 1) m.gaps += g.seq - e.g.seq - 1;
    e = {std::move(g), now_ns()};
  }
};

GaugeBoard::GaugeBoard(const std::string& url, std::function<bool(const std::string&)> known)
    : impl_(std::make_unique<Impl>()) {
  impl_->known = std::move(known);
  impl_->nats = std::make_unique<NatsListener>(
      url, "reading load gauges", std::string(kLoadSubject) + ">", Impl::on_msg, impl_.get());
}

GaugeBoard::~GaugeBoard() {
  impl_->nats.reset();  // no message is delivered after this
}

std::optional<LoadGauge> GaugeBoard::get(const std::string& id, int64_t max_age_ms) const {
  auto r = read(id, max_age_ms);
  if (!r) return std::nullopt;
  return std::move(r->g);
}

std::optional<GaugeBoard::Reading> GaugeBoard::read(const std::string& id,
                                                    int64_t max_age_ms) const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->latest.find(id);
  const int64_t now = now_ns();
  if (it == impl_->latest.end() || now - it->second.at_ns > max_age_ms * 1'000'000)
    return std::nullopt;
  return Reading{it->second.g, now - it->second.at_ns, it->second.at_ns};
}

bool GaugeBoard::connected() const {
  return natsConnection_Status(impl_->nats->connection()) == NATS_CONN_STATUS_CONNECTED;
}
int64_t GaugeBoard::gaps() const {
  return impl_->gaps.load();
}
int64_t GaugeBoard::ignored() const {
  return impl_->ignored.count();
}

}  // namespace mmrt::cluster

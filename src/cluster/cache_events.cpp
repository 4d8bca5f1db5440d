#include "cluster/cache_events.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_set>

#include "cluster/nats_link.h"
#include "cluster/wire_fields.h"
#include "core/error.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

constexpr size_t kMaxOps = 65536;

}  // namespace

std::string to_json(const CacheEvents& e) {
  json ops = json::array();
  for (const auto& [stored, h] : e.ops)
    ops.push_back(std::string(stored ? "+" : "-").append(h.hex()));
  return json{{"id", e.id},
              {"snapshot", e.snapshot},
              {"first", e.first},
              {"last", e.last},
              {"ops", std::move(ops)}}
      .dump();
}

CacheEvents parse_cache_events(std::string_view s) {
  if (s.size() > kMaxOps * 40 + 1024) throw FormatError("cache events: too large");
  const json j = WireFields::parse(s, kMaxOps + 64, "cache events");
  const WireFields f(j, "cache events");
  CacheEvents e;
  e.id = f.text("id");
  if (e.id.empty()) f.fail("'id' is empty");
  e.snapshot = f.boolean("snapshot");
  e.first = static_cast<uint64_t>(f.count("first"));
  e.last = static_cast<uint64_t>(f.count("last"));
  const json& ops = f.get("ops");
  if (!ops.is_array() || ops.size() > kMaxOps)
    f.fail("'ops' is not a list of at most 65536 entries");
  for (const json& o : ops) {
    Hash128 h;
    const std::string* op = o.is_string() ? &o.get_ref<const std::string&>() : nullptr;
    if (!op || op->size() != 33 || ((*op)[0] != '+' && (*op)[0] != '-') ||
        !Hash128::from_hex(std::string_view(*op).substr(1), h))
      f.fail("an entry is not +/- and 32 hex digits");
    const bool stored = (*op)[0] == '+';
    if (e.snapshot && !stored) f.fail("a snapshot removes nothing");
    e.ops.emplace_back(stored, h);
  }
  if (!e.snapshot && (e.ops.empty() || e.first == 0 || e.last != e.first + e.ops.size() - 1))
    f.fail("'first' and 'last' do not number its entries");
  return e;
}

// ---- publisher ----

struct CachePublisher::Impl {
  natsConnection* nc = nullptr;
  natsSubscription* snapshots = nullptr;
  CacheTopic topic = kMediaTopic;
  std::string id, subject;
  int64_t period_ms = 100;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  uint64_t seq = 0;                                 // the last change's number
  uint64_t sent = 0;                                // the last change published
  std::vector<std::pair<bool, Hash128>> pending;    // changes sent+1..seq
  std::unordered_set<Hash128, Hash128Hasher> held;  // the set as of seq
  std::thread thread;

  static void on_snapshot(natsConnection* nc, natsSubscription*, natsMsg* msg, void* closure) {
    auto& m = *static_cast<Impl*>(closure);
    CacheEvents e;
    e.id = m.id;
    e.snapshot = true;
    {
      std::lock_guard<std::mutex> lk(m.mu);
      e.first = e.last = m.seq;
      for (const Hash128& h : m.held) {
        if (e.ops.size() >= kSnapshotMax) break;
        e.ops.emplace_back(true, h);
      }
    }
    if (const char* reply = natsMsg_GetReply(msg))
      natsConnection_PublishString(nc, reply, to_json(e).c_str());
    natsMsg_Destroy(msg);
  }

  void run() {
    std::unique_lock<std::mutex> lk(mu);
    while (!cv.wait_for(lk, std::chrono::milliseconds(period_ms), [&] { return stop; })) {
      if (pending.empty()) continue;
      CacheEvents e;
      e.id = id;
      e.first = sent + 1;
      e.last = seq;
      e.ops.swap(pending);
      sent = seq;
      lk.unlock();
      // A batch lost while NATS is away shows the router a gap: it asks for a snapshot.
      for (size_t at = 0; at < e.ops.size(); at += kSnapshotMax) {
        CacheEvents part;
        part.id = e.id;
        part.ops.assign(
            e.ops.begin() + static_cast<std::ptrdiff_t>(at),
            e.ops.begin() + static_cast<std::ptrdiff_t>(std::min(e.ops.size(), at + kSnapshotMax)));
        part.first = e.first + at;
        part.last = part.first + part.ops.size() - 1;
        natsConnection_PublishString(nc, subject.c_str(), to_json(part).c_str());
      }
      lk.lock();
    }
  }
};

CachePublisher::CachePublisher(const std::string& url, const CacheTopic& topic, int64_t period_ms)
    : impl_(std::make_unique<Impl>()) {
  impl_->nc = nats_connect(url, std::string("publishing ") + topic.what + " events");
  impl_->topic = topic;
  impl_->period_ms = period_ms;
}

void CachePublisher::start(std::string id) {
  Impl& m = *impl_;
  if (m.thread.joinable()) throw InternalError("cache-event publisher started twice");
  {
    std::lock_guard<std::mutex> lk(m.mu);
    m.id = std::move(id);
    m.subject = m.topic.subject() + m.id;
  }
  const std::string snap = m.topic.snapshot_subject() + m.id;
  if (natsConnection_Subscribe(&m.snapshots, m.nc, snap.c_str(), Impl::on_snapshot, &m) != NATS_OK)
    throw Unavailable("NATS: cannot subscribe to " + snap);
  m.thread = std::thread([&m] { m.run(); });
}

CachePublisher::~CachePublisher() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->snapshots) {
    natsSubscription_Unsubscribe(impl_->snapshots);
    natsSubscription_Destroy(impl_->snapshots);
  }
  natsConnection_Destroy(impl_->nc);
}

void CachePublisher::on_change(bool stored, const Hash128& key) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  Impl& m = *impl_;
  ++m.seq;
  m.pending.emplace_back(stored, key);
  if (stored)
    m.held.insert(key);
  else
    m.held.erase(key);
}

// ---- board ----

struct CacheBoard::Impl {
  explicit Impl(const CacheTopic& t)
      : topic(t),
        subject(t.subject()),
        snapshot_subject(t.snapshot_subject()),
        ignored(std::string(t.what) + " events") {}
  const CacheTopic topic;
  const std::string subject, snapshot_subject;
  std::unique_ptr<NatsListener> nats;
  std::function<bool(const std::string&)> known;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  struct Worker {
    bool synced = false;
    uint64_t seq = 0;
    std::unordered_set<Hash128, Hash128Hasher> held;
  };
  std::map<std::string, Worker> workers;
  std::set<std::string> to_sync;  // asked for a snapshot by the resync thread
  std::atomic<int64_t> resyncs{0};
  IgnoredLog ignored;
  std::thread resyncer;

  // Applies `e` to `w` (under mu): the changes after w.seq; a gap asks for a snapshot.
  void apply(const std::string& id, Worker& w, const CacheEvents& e) {
    if (e.snapshot) {
      w.held.clear();
      for (const auto& [stored, h] : e.ops) w.held.insert(h);
      w.seq = e.last;
      w.synced = true;
      return;
    }
    if (!w.synced || e.first > w.seq + 1) {  // first sight, or a batch was lost
      w.synced = false;
      to_sync.insert(id);
      cv.notify_all();
      return;
    }
    if (e.last <= w.seq) {  // already in the snapshot
      ignored.add(subject + id, "already applied");
      return;
    }
    for (uint64_t n = e.first; n <= e.last; ++n) {
      if (n <= w.seq) continue;
      const auto& [stored, h] = e.ops[n - e.first];
      if (stored) {
        if (w.held.size() < topic.max_held) w.held.insert(h);
      } else {
        w.held.erase(h);
      }
    }
    w.seq = e.last;
  }

  static void on_msg(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
    auto& m = *static_cast<Impl*>(closure);
    const std::string subject = natsMsg_GetSubject(msg);
    if (subject.rfind(m.snapshot_subject, 0) == 0) {  // another router's request
      natsMsg_Destroy(msg);
      return;
    }
    CacheEvents e;
    try {
      e = parse_cache_events(
          std::string_view(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg))));
    } catch (const std::exception& err) {
      natsMsg_Destroy(msg);
      return m.ignored.add(subject, err.what());
    }
    natsMsg_Destroy(msg);
    if (e.snapshot) return m.ignored.add(subject, "a snapshot is an answer, not an event");
    if (subject != m.subject + e.id)
      return m.ignored.add(subject, "its id '" + e.id + "' is not its subject's");
    if (!m.known(e.id)) return m.ignored.add(subject, "no worker '" + e.id + "' is registered");
    std::lock_guard<std::mutex> lk(m.mu);
    m.apply(e.id, m.workers[e.id], e);
  }

  void resync_loop() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait_for(lk, std::chrono::milliseconds(500), [&] { return stop || !to_sync.empty(); });
      if (stop) return;
      const std::set<std::string> ids = std::move(to_sync);
      to_sync.clear();
      lk.unlock();
      for (const std::string& id : ids) {
        natsMsg* reply = nullptr;
        const std::string snap = snapshot_subject + id;
        const natsStatus s =
            natsConnection_RequestString(&reply, nats->connection(), snap.c_str(), "", 1000);
        if (s != NATS_OK) {
          ignored.add(snap, std::string("no snapshot: ") + natsStatus_GetText(s));
          lk.lock();
          if (known(id)) to_sync.insert(id);  // asked again after the wait
          lk.unlock();
          continue;
        }
        CacheEvents e;
        try {
          e = parse_cache_events(std::string_view(
              natsMsg_GetData(reply), static_cast<size_t>(natsMsg_GetDataLength(reply))));
        } catch (const std::exception& err) {
          natsMsg_Destroy(reply);
          ignored.add(snap, err.what());
          continue;
        }
        natsMsg_Destroy(reply);
        if (!e.snapshot || e.id != id) {
          ignored.add(snap, "the answer is not " + id + "'s snapshot");
          continue;
        }
        ++resyncs;
        std::lock_guard<std::mutex> g(mu);
        apply(id, workers[id], e);
      }
      lk.lock();
    }
  }
};

CacheBoard::CacheBoard(const std::string& url, const CacheTopic& topic,
                       std::function<bool(const std::string&)> known)
    : impl_(std::make_unique<Impl>(topic)) {
  impl_->known = std::move(known);
  impl_->nats =
      std::make_unique<NatsListener>(url, std::string("reading ") + topic.what + " events",
                                     impl_->subject + ">", Impl::on_msg, impl_.get());
  impl_->resyncer = std::thread([m = impl_.get()] { m->resync_loop(); });
}

CacheBoard::~CacheBoard() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->resyncer.join();
  impl_->nats.reset();
}

int64_t CacheBoard::holds(const std::string& id, std::span<const Hash128> keys) const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->workers.find(id);
  if (it == impl_->workers.end() || !it->second.synced) return 0;
  int64_t n = 0;
  for (const Hash128& h : keys) n += it->second.held.count(h);
  return n;
}

int64_t CacheBoard::leading(const std::string& id, std::span<const Hash128> chain) const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->workers.find(id);
  if (it == impl_->workers.end() || !it->second.synced) return -1;
  int64_t n = 0;
  for (const Hash128& h : chain) {
    if (!it->second.held.count(h)) break;
    ++n;
  }
  return n;
}

bool CacheBoard::empty() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  for (const auto& [id, w] : impl_->workers)
    if (w.synced && !w.held.empty()) return false;
  return true;
}

int64_t CacheBoard::resyncs() const {
  return impl_->resyncs.load();
}
int64_t CacheBoard::ignored() const {
  return impl_->ignored.count();
}

}  // namespace mmrt::cluster

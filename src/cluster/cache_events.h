// What each worker's caches hold, told to the router over NATS (Core), one topic per cache:
//   media  the encoder cache, keyed by the hash of a media file's bytes (engine/encoder_cache.h's
//          listener; the router hashes a request's inline media): a request whose images a
//          worker has encoded goes there.
//   kv     the prefix cache, keyed by the chained block hashes (engine/kv_manager.h's listener;
//          the router computes a request's chain, cluster/prompt_blocks.h): the router knows how
//          much of a prompt each worker would not have to prefill (Dynamo's KV events).
// A worker numbers every change (a key stored, a key removed) and publishes them in order, in
// batches, on `mmrt.<topic>.<worker id>`; it answers `mmrt.<topic>.snapshot.<worker id>`
// requests with everything it holds (at most kSnapshotMax keys: a larger cache is shown in part
// until its next changes) and the number of the last change in it. The router applies a batch
// that follows what it has; a gap (a lost batch, NATS restarted, a worker first seen) makes it
// ask for a snapshot, and batches already in the snapshot are dropped: no stale entry survives a
// resync. Payloads are bounded and checked; a bad one is ignored with a log line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"

namespace mmrt::cluster {

// One cache's events: subjects `mmrt.<name>.` and `mmrt.<name>.snapshot.`.
struct CacheTopic {
  const char* name;  // "media", "kv"
  const char* what;  // for log lines: "encoder-cache", "prefix-cache"
  size_t max_held;   // keys the router keeps per worker (more are not recorded)
  std::string subject() const { return std::string("mmrt.") + name + "."; }
  std::string snapshot_subject() const { return subject() + "snapshot."; }
};
inline constexpr CacheTopic kMediaTopic{"media", "encoder-cache", 65536};
inline constexpr CacheTopic kKvTopic{"kv", "prefix-cache", 1 << 20};
// Keys per message (a batch is split; a snapshot holds at most this many): ~600 KB of JSON,
// under NATS's default 1 MB payload.
inline constexpr size_t kSnapshotMax = 16384;

// A batch of changes numbered first..first + ops - 1, or (snapshot) the whole set as of `last`.
struct CacheEvents {
  std::string id;  // the worker's id (as in etcd)
  bool snapshot = false;
  uint64_t first = 0, last = 0;
  std::vector<std::pair<bool, Hash128>> ops;  // (stored?, key); a snapshot: all stored
};

std::string to_json(const CacheEvents& e);
// FormatError naming the field: at most 65,536 entries, numbers consistent with the entries.
CacheEvents parse_cache_events(std::string_view json);

// A worker's side: on_change() is the engine's listener (EngineConfig::on_media_cache or
// on_kv_cache), from the engine's start; once start() names the worker (its id is known when
// it listens), batches go out every `period_ms` on a thread of its own and snapshot requests
// are answered.
class CachePublisher {
 public:
  CachePublisher(const std::string& nats_url, const CacheTopic& topic, int64_t period_ms = 100);
  ~CachePublisher();
  void start(std::string id);
  void on_change(bool stored, const Hash128& key);  // never blocks on NATS

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The router's side: per worker, the keys its cache holds.
class CacheBoard {
 public:
  // `known(id)`: whether the router routes to that worker (others are ignored and logged once).
  CacheBoard(const std::string& nats_url, const CacheTopic& topic,
             std::function<bool(const std::string&)> known);
  ~CacheBoard();
  // How many of `keys` the worker holds (0 when it is not in sync).
  int64_t holds(const std::string& id, std::span<const Hash128> keys) const;
  // How many leading keys of `chain` the worker holds, -1 when it is not in sync (a prefix
  // cache's match: its blocks are looked up in order and the first miss ends it).
  int64_t leading(const std::string& id, std::span<const Hash128> chain) const;
  // No worker in sync holds any key (a request's keys need not be computed).
  bool empty() const;
  int64_t resyncs() const;  // snapshots taken
  int64_t ignored() const;  // bad payloads, unknown workers, batches already applied

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::cluster

// What each worker's encoder cache holds, told to the router over NATS (Core) so that a request
// whose images a worker has already encoded goes there. A worker numbers every change (a file
// stored, a file removed: engine/encoder_cache.h's listener, keyed by the hash of the file's
// bytes, which the router computes from a request's inline media) and publishes them in order,
// in batches, on `mmrt.media.<worker id>`; it answers `mmrt.media.snapshot.<worker id>`
// requests with everything it holds and the number of the last change in it. The router applies
// a batch that follows what it has; a gap (a lost batch, NATS restarted, a worker first seen)
// makes it ask for a snapshot, and batches already in the snapshot are dropped: no stale entry
// survives a resync. Payloads are bounded and checked; a bad one is ignored with a log line.
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

inline constexpr const char* kMediaSubject = "mmrt.media.";
inline constexpr const char* kMediaSnapshotSubject = "mmrt.media.snapshot.";

// A batch of changes numbered first..first + ops - 1, or (snapshot) the whole set as of `last`.
struct MediaEvents {
  std::string id;  // the worker's id (as in etcd)
  bool snapshot = false;
  uint64_t first = 0, last = 0;
  std::vector<std::pair<bool, Hash128>> ops;  // (stored?, file hash); a snapshot: all stored
};

std::string to_json(const MediaEvents& e);
// FormatError naming the field: at most 65,536 entries, numbers consistent with the entries.
MediaEvents parse_media_events(std::string_view json);

// A worker's side: on_change() is the engine's listener (EngineConfig::on_media_cache), from the
// engine's start; once start() names the worker (its id is known when it listens), batches go
// out every `period_ms` on a thread of its own and snapshot requests are answered.
class MediaPublisher {
 public:
  explicit MediaPublisher(const std::string& nats_url, int64_t period_ms = 100);
  ~MediaPublisher();
  void start(std::string id);
  void on_change(bool stored, const Hash128& file);  // never blocks on NATS

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The router's side: per worker, the files its encoder cache holds.
class MediaBoard {
 public:
  // `known(id)`: whether the router routes to that worker (others are ignored and logged once).
  MediaBoard(const std::string& nats_url, std::function<bool(const std::string&)> known);
  ~MediaBoard();
  // How many of `files` the worker holds (0 when it is not in sync).
  int64_t holds(const std::string& id, std::span<const Hash128> files) const;
  // No worker in sync holds any file (a request's media need not be hashed).
  bool empty() const;
  int64_t resyncs() const;  // snapshots taken
  int64_t ignored() const;  // bad payloads, unknown workers, batches already applied

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::cluster

// Work that must not run on an I/O thread (parsing large request bodies: JSON, base64 media, local
// files; writing trace files), in two lanes so that a huge body never queues an ordinary request
// behind it: bodies of at least `large_bytes` go to the large lane, everything else to the small
// one, each with its own thread and FIFO. The bytes waiting in both are bounded: past
// `max_queued_bytes` a submit is refused (the caller answers 503) instead of holding more bodies.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace mmrt::server {

struct IntakeOptions {
  size_t large_bytes = size_t{1} << 20;
  size_t max_queued_bytes = size_t{256} << 20;
};

class Intake {
 public:
  explicit Intake(const IntakeOptions& opt = {});
  ~Intake();  // stop()
  // Runs fn on the lane for a body of `bytes` (0: small work), counting `bytes` as queued until
  // fn returns. false, and fn dropped, when that would pass max_queued_bytes or after stop().
  bool submit(size_t bytes, std::function<void()> fn);
  // Joins the lanes; work still queued is dropped.
  void stop();
  size_t queued_bytes() const;

 private:
  struct Job {
    size_t bytes;
    std::function<void()> fn;
  };
  struct Lane {
    std::deque<Job> q;
    std::thread thread;
  };
  void run(Lane& lane);

  IntakeOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t queued_ = 0;
  bool stop_ = false;
  Lane small_, large_;
};

}  // namespace mmrt::server

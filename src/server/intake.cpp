#include "server/intake.h"

namespace mmrt::server {

Intake::Intake(const IntakeOptions& opt) : opt_(opt) {
  small_.thread = std::thread([this] { run(small_); });
  large_.thread = std::thread([this] { run(large_); });
}

Intake::~Intake() {
  stop();
}

bool Intake::submit(size_t bytes, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ || (bytes > 0 && queued_ + bytes > opt_.max_queued_bytes)) return false;
    queued_ += bytes;
    (bytes >= opt_.large_bytes ? large_ : small_).q.push_back({bytes, std::move(fn)});
  }
  cv_.notify_all();
  return true;
}

void Intake::run(Lane& lane) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !lane.q.empty(); });
      if (stop_) return;
      job = std::move(lane.q.front());
      lane.q.pop_front();
    }
    job.fn();
    job.fn = nullptr;  // the body it held goes before the bytes are counted out
    std::lock_guard<std::mutex> lk(mu_);
    queued_ -= job.bytes;
  }
}

void Intake::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    small_.q.clear();
    large_.q.clear();
  }
  cv_.notify_all();
  for (Lane* l : {&small_, &large_})
    if (l->thread.joinable()) l->thread.join();
}

size_t Intake::queued_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return queued_;
}

}  // namespace mmrt::server

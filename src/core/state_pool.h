// Reusable per-call working state owned by an object that many threads may use at once (a
// tokenizer's merge scratch and piece cache, a regex's match data): a call leases a state, uses
// it alone, and the lease gives it back. No lock is held while the state is in use; the pool holds
// as many states as calls ever ran at the same time. The owner's lifetime bounds every state;
// nothing is shared between owners or kept per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace mmrt {

template <class T>
class StatePool {
 public:
  StatePool() : make_([] { return std::make_unique<T>(); }) {}
  explicit StatePool(std::function<std::unique_ptr<T>()> make) : make_(std::move(make)) {}
  StatePool(const StatePool&) = delete;
  StatePool& operator=(const StatePool&) = delete;

  class Lease {
   public:
    Lease(const StatePool* pool, std::unique_ptr<T> s, uint64_t gen)
        : pool_(pool), s_(std::move(s)), gen_(gen) {}
    Lease(Lease&& o) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (s_) pool_->give_back(std::move(s_), gen_);
    }
    T& operator*() const { return *s_; }
    T* operator->() const { return s_.get(); }

   private:
    const StatePool* pool_;
    std::unique_ptr<T> s_;
    uint64_t gen_;
  };

  // An idle state, or a new one when every state is in use.
  Lease acquire() const {
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lk(mu_);
      gen = generation_;
      if (!idle_.empty()) {
        std::unique_ptr<T> s = std::move(idle_.back());
        idle_.pop_back();
        return Lease(this, std::move(s), gen);
      }
    }
    return Lease(this, make_(), gen);
  }
  // Forgets every state: idle ones now, leased ones when they are given back (their contents
  // stay valid for the call using them).
  void clear() const {
    std::vector<std::unique_ptr<T>> drop;
    std::lock_guard<std::mutex> lk(mu_);
    drop.swap(idle_);
    ++generation_;
  }

 private:
  void give_back(std::unique_ptr<T> s, uint64_t gen) const {
    std::lock_guard<std::mutex> lk(mu_);
    if (gen == generation_) idle_.push_back(std::move(s));
  }
  std::function<std::unique_ptr<T>()> make_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<T>> idle_;
  mutable uint64_t generation_ = 0;
};

}  // namespace mmrt

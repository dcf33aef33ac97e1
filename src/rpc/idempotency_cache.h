// Finished responses by idempotency key, oldest evicted first: a retried
// request gets the first answer without running again, and a duplicate that
// arrives while the first is running waits for it. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace cuda_agent::rpc {

template <class Response>
class IdempotencyCache {
 public:
  explicit IdempotencyCache(size_t capacity) : capacity_(capacity) {}

  // If `key` finished, copies its response and returns true. If it is running,
  // waits for it. Otherwise marks it running and returns false: the caller must
  // then call Finish() or Abandon().
  bool BeginOrGet(const std::string& key, Response* out) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      auto it = done_.find(key);
      if (it != done_.end()) {
        *out = it->second;
        return true;
      }
      if (!running_.count(key)) break;
      cv_.wait(lock);
    }
    running_.insert(key);
    return false;
  }

  void Finish(const std::string& key, const Response& response) {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(key);
    if (capacity_ > 0) {
      done_[key] = response;
      order_.push_back(key);
      while (order_.size() > capacity_) {
        done_.erase(order_.front());
        order_.pop_front();
      }
    }
    cv_.notify_all();
  }

  void Abandon(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(key);
    cv_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Response> done_;  // guarded by mu_
  std::deque<std::string> order_;         // guarded by mu_
  std::set<std::string> running_;         // guarded by mu_
};

}  // namespace cuda_agent::rpc

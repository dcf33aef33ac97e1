// Newline-delimited JSON over a pair of file descriptors: how the judge talks to
// its harness processes. One JSON object per line in each direction.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/status.h"

namespace cuda_agent {

// Not thread-safe; one owner. Does not own the descriptors.
class JsonLineChannel {
 public:
  // `read_fd` carries messages from the peer; `write_fd` carries ours (-1: none).
  JsonLineChannel(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}

  Status Send(const nlohmann::json& message);
  // Waits until `deadline` for the next line. Returns kDeadlineExceeded on time-out
  // and kUnavailable when the peer closed its end (it exited or crashed). Lines
  // longer than `max_line_bytes` or not valid JSON are kInternal.
  StatusOr<nlohmann::json> Receive(std::chrono::steady_clock::time_point deadline);

  static constexpr size_t kMaxLineBytes = 64 << 20;

 private:
  int read_fd_;
  int write_fd_;
  std::string buffer_;
};

}  // namespace cuda_agent

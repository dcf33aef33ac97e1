#include "cuda_agent/util/json_lines.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace cuda_agent {

Status JsonLineChannel::Send(const nlohmann::json& message) {
  if (write_fd_ < 0) return Internal("channel has no write end");
  std::string line = message.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(write_fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("peer closed its input");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

StatusOr<nlohmann::json> JsonLineChannel::Receive(std::chrono::steady_clock::time_point deadline) {
  char buf[65536];
  while (true) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded() || !parsed.is_object())
        return Internal("malformed message from harness: " + line.substr(0, 200));
      return parsed;
    }
    if (buffer_.size() > kMaxLineBytes) return Internal("harness message longer than 64 MiB");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return DeadlineExceeded("no message before the deadline");
    pollfd p{read_fd_, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) continue;
    ssize_t got = ::read(read_fd_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Unavailable("harness closed its message channel");
    buffer_.append(buf, static_cast<size_t>(got));
  }
}

}  // namespace cuda_agent

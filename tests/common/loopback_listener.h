// A TCP listener on the host's loopback for containment tests: sandboxed code
// tries to reach it, and the test checks that nothing ever connected.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cuda_agent::testing {

class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd_, 4) == 0;
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~LoopbackListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  int port() const { return port_; }
  // True if anyone connected since construction.
  bool Reached() const { return ::accept(fd_, nullptr, nullptr) >= 0; }

 private:
  int fd_ = -1;
  int port_ = 0;
  bool ok_ = false;
};

}  // namespace cuda_agent::testing

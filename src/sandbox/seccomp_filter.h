// The sandbox's seccomp deny-list, compiled once to a BPF program in the parent
// so the child can install it with prctl() alone (no allocation after fork).
#pragma once

#include <linux/filter.h>

#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::sandbox {

// Denied with EPERM: ptrace, process_vm_*, mount/umount/pivot_root/chroot,
// namespaces (unshare, setns), bpf, perf_event_open, kernel modules, kexec,
// reboot, swap, keyrings, userfaultfd, open_by_handle_at, and socket() for every
// address family but AF_UNIX. Everything else is allowed.
class SeccompFilter {
 public:
  static StatusOr<SeccompFilter> Build();
  // Async-signal-safe: sets no_new_privs and loads the program. Returns 0 or -errno.
  int Install() const;

 private:
  std::vector<sock_filter> program_;
};

}  // namespace cuda_agent::sandbox

// What runs in a sandbox's cloned processes: the init (pid 1 of the new pid
// namespace) and the target it forks. Only async-signal-safe calls and raw
// syscalls here: the judge is multi-threaded, and a cloned child must not touch
// locks (malloc's, glibc's setxid broadcast) another thread may have held.
#pragma once

#include <sys/resource.h>

#include <vector>

#include "seccomp_filter.h"

namespace cuda_agent::sandbox {

// Everything the cloned child needs, prepared before clone() so the child never
// allocates (the parent may be multi-threaded).
struct ChildPlan {
  bool namespaces = false;
  bool drop_uid = false;
  const SeccompFilter* seccomp = nullptr;
  uid_t uid = 65534;
  gid_t gid = 65534;
  int sync_read = -1;     // parent -> init: "cgroup attached, go"
  int status_write = -1;  // init -> parent: target pid, then its wait status
  int setup_write = -1;   // target -> parent: a SetupStep byte if setup failed before exec (close-on-exec)
  int stdin_read = -1, message_write = -1, stdout_fd = -1, stderr_fd = -1;
  const char* exe = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;
  std::vector<const char*> remount_ro;  // host mount points
  std::vector<const char*> hidden;
  std::vector<const char*> mkdirs;  // bind targets to create inside hidden tmpfs
  std::vector<const char*> bind_paths;
  std::vector<char> bind_writable;
  std::vector<int> bind_fds;        // filled in the child
  std::vector<char> bind_fd_paths;  // "/proc/self/fd/N" buffers, 32 bytes each
  std::vector<const char*> masked_devices;
  const char* shm_options = nullptr;
  rlim_t cpu_s = 0, fsize_bytes = 0, nofile = 0;
};

// Entry point of the cloned init; `arg` is the ChildPlan. Never returns.
int InitMain(void* arg);
// write() until done or the peer is gone; async-signal-safe.
void WriteAll(int fd, const void* data, size_t n);
// What a byte on ChildPlan::setup_write means.
const char* SetupStepName(char step);

}  // namespace cuda_agent::sandbox

// Options of the sandbox component (DESIGN.md §5, "Sandbox").
#pragma once

#include <cstdint>
#include <string>

#include "cuda_agent/config/fields.h"

namespace cuda_agent::config {

struct SandboxConfig {
  bool isolate = true;
  bool allow_weaker = false;
  int64_t uid = 65534;
  int64_t gid = 65534;
  int64_t memory_limit_mb = 16384;
  int64_t max_processes = 1024;
  int64_t max_file_size_mb = 2048;
  int64_t max_open_files = 4096;
  int64_t cpu_time_limit_s = 1800;
  int64_t shm_size_mb = 256;
  bool seccomp = true;

  template <class V>
  void Visit(V& v) {
    v("isolate", isolate,
      "run each compile and run in new mount/pid/net/ipc/uts namespaces as an unprivileged uid; "
      "false is for debugging only and is recorded in every verdict");
    v("allow_weaker", allow_weaker,
      "if the host lacks an isolation feature (namespaces, cgroups, seccomp), run without it and record "
      "that in the verdict instead of refusing");
    v("uid", uid, "uid the sandboxed process runs as", Range{1, 4294967294.0});
    v("gid", gid, "gid the sandboxed process runs as", Range{1, 4294967294.0});
    v("memory_limit_mb", memory_limit_mb, "host memory limit of one sandbox (cgroup), MiB", Range{64, 1 << 24});
    v("max_processes", max_processes, "processes and threads one sandbox may hold (pids cgroup)", Range{16, 1 << 20});
    v("max_file_size_mb", max_file_size_mb, "largest file a sandboxed process may write (RLIMIT_FSIZE), MiB",
      Range{1, 1 << 24});
    v("max_open_files", max_open_files, "open file descriptors per process (RLIMIT_NOFILE)", Range{64, 1 << 20});
    v("cpu_time_limit_s", cpu_time_limit_s, "CPU seconds per process (RLIMIT_CPU)", Range{1, 1 << 24});
    v("shm_size_mb", shm_size_mb, "size of the private /dev/shm tmpfs, MiB", Range{1, 1 << 20});
    v("seccomp", seccomp, "install the seccomp deny-list (ptrace, mount, bpf, non-unix sockets, ...)");
  }
};

}  // namespace cuda_agent::config

// Per-sandbox control groups limiting memory and process count. Supports the
// v1 hierarchy (separate memory/ and pids/ mounts) and the unified v2 one.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::sandbox {

class Cgroup {
 public:
  // Whether this host lets us create limited cgroups; the reason when not.
  static Status Probe();
  // Creates a fresh cgroup named `name` with the given limits.
  static StatusOr<std::unique_ptr<Cgroup>> Create(const std::string& name, int64_t memory_bytes, int64_t max_pids);
  // Kills what is left inside and removes the directories.
  ~Cgroup();

  Status Attach(pid_t pid);
  // True when the kernel's OOM killer fired inside this cgroup.
  bool OomKilled() const;
  // Peak memory use in bytes, or -1 if unknown.
  int64_t PeakMemoryBytes() const;

 private:
  Cgroup() = default;
  bool v2_ = false;
  std::vector<std::string> dirs_;  // v1: memory dir then pids dir; v2: one dir
};

}  // namespace cuda_agent::sandbox

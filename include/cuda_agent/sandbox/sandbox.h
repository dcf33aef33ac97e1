// Isolated process launch (DESIGN.md §5, "Sandbox").
//
// Each Spawn() starts a process tree of its own: new mount, pid, network, ipc
// and uts namespaces (no network at all), an unprivileged uid, a read-only view
// of the host except the directories bound writable, a private /proc, /dev/shm
// and /tmp-free environment, only the assigned GPU's device node, rlimits, a
// memory and pids cgroup, and a seccomp deny-list. Killing the tree's init
// (pid 1 of its namespace) kills everything in it, so a wall-clock time-out
// leaves nothing behind.
//
// Thread-safe: Spawn() may be called from several threads at once.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda_agent/config/sandbox_config.h"
#include "cuda_agent/util/status.h"

namespace cuda_agent::sandbox {

// What isolation a sandbox actually provides on this host.
struct Isolation {
  bool namespaces = false;  // mount/pid/net/ipc/uts namespaces and read-only remount
  bool drop_uid = false;    // runs as the configured unprivileged uid
  bool cgroups = false;     // memory and pids limits
  bool seccomp = false;     // syscall deny-list
  bool Full() const { return namespaces && drop_uid && cgroups && seccomp; }
  // "full" or e.g. "weaker: no cgroups (reason)".
  std::string description;
};

struct Bind {
  std::filesystem::path path;  // same path inside and outside
  bool writable = false;
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is resolved through PATH before launch
  std::vector<std::string> env;   // the whole environment, "KEY=VALUE"
  std::filesystem::path cwd;      // must be one of `binds` or readable
  // Directories covered by an empty read-only tmpfs (other evaluations, caches)...
  std::vector<std::filesystem::path> hidden;
  // ...then these are bound back in, at the same path.
  std::vector<Bind> binds;
  std::filesystem::path stdout_path;  // captured output; created, owned by the sandbox uid
  std::filesystem::path stderr_path;
  std::optional<int> gpu;  // the one /dev/nvidiaN left visible; none when empty
  bool pipes = true;       // stdin is a pipe from the parent, fd 3 a pipe to it
};

// How a sandboxed process ended.
struct ExitInfo {
  int exit_code = -1;  // -1 when it died of a signal
  int signal = 0;
  bool timed_out = false;        // killed at the wall-clock limit
  bool oom_killed = false;       // the cgroup's memory limit fired
  bool cpu_limit = false;        // RLIMIT_CPU
  bool file_size_limit = false;  // RLIMIT_FSIZE (SIGXFSZ)
  double wall_s = 0;
  int64_t peak_memory_bytes = -1;
  std::string setup_error;  // non-empty when the sandbox failed before the program ran
  bool Succeeded() const { return exit_code == 0 && !timed_out; }
  // "exit 1", "killed by SIGSEGV", "killed: memory limit", "timed out after 30 s".
  std::string Describe() const;
};

class Process {
 public:
  virtual ~Process() = default;  // kills the tree if still running
  // Write end of the child's stdin, read end of its fd 3; -1 without pipes.
  virtual int stdin_fd() const = 0;
  virtual int message_fd() const = 0;
  // Closes our end of the child's stdin (the child sees EOF).
  virtual void CloseStdin() = 0;
  // Waits for the tree to end; kills it at `deadline` (then timed_out is set).
  virtual StatusOr<ExitInfo> Wait(std::chrono::steady_clock::time_point deadline) = 0;
  // Kills the whole tree now; Wait() then returns promptly.
  virtual void Kill() = 0;
};

class Sandbox {
 public:
  // Probes the host. Fails with a clear message when isolation is incomplete and
  // the config does not allow a weaker mode.
  static StatusOr<std::unique_ptr<Sandbox>> Create(const config::SandboxConfig& config);

  const Isolation& isolation() const { return isolation_; }
  const config::SandboxConfig& config() const { return config_; }

  StatusOr<std::unique_ptr<Process>> Spawn(const SpawnSpec& spec) const;

 private:
  Sandbox(config::SandboxConfig config, Isolation isolation);
  struct Impl;
  config::SandboxConfig config_;
  Isolation isolation_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cuda_agent::sandbox

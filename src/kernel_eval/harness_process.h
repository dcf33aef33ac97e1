// One sandboxed process of the Python harness, with its message channel.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cuda_agent/sandbox/sandbox.h"
#include "cuda_agent/util/json_lines.h"

namespace cuda_agent::kernel_eval {

using Clock = std::chrono::steady_clock;

class HarnessProcess {
 public:
  // Starts `spec` (argv, env, binds already filled) in `sandbox`.
  static StatusOr<std::unique_ptr<HarnessProcess>> Start(const sandbox::Sandbox& sandbox,
                                                         const sandbox::SpawnSpec& spec);

  Status Send(const nlohmann::json& command) { return channel_.Send(command); }
  // The next message. kUnavailable: the process closed fd 3 (exited or died);
  // kDeadlineExceeded: nothing before `deadline`.
  StatusOr<nlohmann::json> Receive(Clock::time_point deadline) { return channel_.Receive(deadline); }
  // Closes stdin and waits for the process tree to end (killing it at `deadline`).
  StatusOr<sandbox::ExitInfo> Finish(Clock::time_point deadline);
  void Kill() { process_->Kill(); }
  // The last `max_bytes` of stderr (and stdout when stderr is empty).
  std::string LogTail(size_t max_bytes) const;

 private:
  HarnessProcess(std::unique_ptr<sandbox::Process> process, sandbox::SpawnSpec spec)
      : process_(std::move(process)), spec_(std::move(spec)), channel_(process_->message_fd(), process_->stdin_fd()) {}

  std::unique_ptr<sandbox::Process> process_;
  sandbox::SpawnSpec spec_;
  JsonLineChannel channel_;
};

}  // namespace cuda_agent::kernel_eval

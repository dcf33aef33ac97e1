// Runs a trusted helper command (a version probe, a compiler query) and collects
// its output. Not for candidate code: that goes through sandbox::Sandbox.
#pragma once

#include <string>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the terminating signal, or 0
  std::string output;  // stdout and stderr interleaved
};

// Runs argv[0] (searched in PATH) with a wall-clock limit. A command that
// cannot be started or outlives `timeout_s` is an error; a non-zero exit is not.
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s);

}  // namespace cuda_agent

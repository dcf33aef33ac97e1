// Start-up probe of the harness's Python: interpreter, torch, device.
#pragma once

#include <string>

#include "cuda_agent/kernel_eval/judge.h"

namespace cuda_agent::kernel_eval {

// Runs `python` once (trusted, not sandboxed) to learn what harness processes
// need to read and what device they will see.
StatusOr<PythonEnv> ProbePython(const std::string& python);

}  // namespace cuda_agent::kernel_eval

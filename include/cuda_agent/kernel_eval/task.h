// A KernelBench-style task: a Python file with `class Model(nn.Module)`,
// `get_inputs()` and `get_init_inputs()` (DESIGN.md §4).
#pragma once

#include <filesystem>
#include <string>

#include "cuda_agent/util/status.h"

namespace cuda_agent::kernel_eval {

struct Task {
  std::filesystem::path path;
  std::string name;    // file stem, e.g. "19_ReLU"
  std::string source;  // the file's text
  std::string hash;    // SHA-256 of source
};

// Reads and sanity-checks a task file. The full check (that it imports and
// runs) happens in the reference process; this catches the obvious mistakes
// with a message naming the file.
StatusOr<Task> LoadTask(const std::filesystem::path& path);

}  // namespace cuda_agent::kernel_eval

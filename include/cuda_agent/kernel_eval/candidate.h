// A candidate solution in one of the two formats of DESIGN.md §4.
#pragma once

#include <filesystem>
#include <string>

#include "cuda_agent/util/status.h"

namespace cuda_agent::kernel_eval {

enum class CandidateKind {
  kKernelBench,  // one .py file: class ModelNew, kernels built with load_inline
  kWorkspace,    // a directory: model_new.py + kernels/*.cu|*.cpp + kernels/*_binding.cpp
};

const char* CandidateKindName(CandidateKind kind);

struct Candidate {
  CandidateKind kind = CandidateKind::kKernelBench;
  std::filesystem::path root;         // the .py file, or the workspace directory
  std::filesystem::path module_name;  // model file relative to the copy: "model_new.py"
  std::string hash;                   // SHA-256 over every file's path and contents
};

// Accepts a .py file (KernelBench form), or a directory holding model_new.py
// (with kernels/ it is the workspace form). Refuses symlinks, more than 256
// files or 16 MiB in all.
StatusOr<Candidate> LoadCandidate(const std::filesystem::path& path);

}  // namespace cuda_agent::kernel_eval

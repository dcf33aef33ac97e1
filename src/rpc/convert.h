// proto <-> C++ for the Worker service. Generated types stop here.
#pragma once

#include <filesystem>

#include "cuda_agent/kernel_eval/candidate.h"
#include "cuda_agent/kernel_eval/task.h"
#include "cuda_agent/kernel_eval/verdict.h"
#include "cuda_agent/v1/worker.pb.h"

namespace cuda_agent::rpc {

void ToProto(const kernel_eval::Verdict& verdict, v1::Verdict* out);
kernel_eval::Verdict FromProto(const v1::Verdict& verdict);

// Reads a task and a candidate from disk into a request.
Status ToProto(const kernel_eval::Task& task, const kernel_eval::Candidate& candidate, v1::EvaluateRequest* out);

// Writes a request's task and candidate under `dir` (task.py, candidate/...)
// after checking every path (relative, no "..", at most 256 files) and loads them.
struct Materialized {
  kernel_eval::Task task;
  kernel_eval::Candidate candidate;
};
StatusOr<Materialized> Materialize(const v1::EvaluateRequest& request, const std::filesystem::path& dir);

}  // namespace cuda_agent::rpc

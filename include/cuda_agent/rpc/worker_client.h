// Client of the Worker service for trainers and evaluators: plain C++ in and
// out (no protobuf in this header).
//
// Each Evaluate() goes to the least-loaded healthy worker. Infrastructure
// failures (worker unreachable or shut down, queue full, the judge failing)
// are retried on another worker with the same idempotency key, within one
// overall deadline; a request is never turned into a verdict it did not get.
// Thread-safe: one client may serve many rollout threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda_agent/config/worker_config.h"
#include "cuda_agent/kernel_eval/candidate.h"
#include "cuda_agent/kernel_eval/task.h"
#include "cuda_agent/kernel_eval/verdict.h"

namespace cuda_agent::rpc {

struct EvaluateResult {
  kernel_eval::Verdict verdict;
  std::string worker;                   // who answered
  bool from_idempotency_cache = false;  // a retry answered from the first result
  int attempts = 0;
};

struct WorkerInfo {
  std::string worker, backend, device_name, torch_version, isolation;
  int max_concurrent = 0;
  int64_t evaluations_done = 0;
  int64_t idempotent_hits = 0;
};

class WorkerClient {
 public:
  static StatusOr<std::unique_ptr<WorkerClient>> Create(const config::ClientConfig& config);
  ~WorkerClient();

  StatusOr<EvaluateResult> Evaluate(const kernel_eval::Task& task, const kernel_eval::Candidate& candidate,
                                    const std::string& idempotency_key);
  StatusOr<WorkerInfo> Info(const std::string& endpoint);

 private:
  WorkerClient() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda_agent::rpc

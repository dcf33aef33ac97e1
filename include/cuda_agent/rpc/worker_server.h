// The Worker gRPC service (proto/cuda_agent/v1/worker.proto) over one Judge.
//
// Evaluations run up to worker.max_concurrent at once (the judge serialises
// the timing phase per device); up to worker.max_queue more wait; beyond that
// requests are refused with RESOURCE_EXHAUSTED. A finished result is kept under
// its idempotency key, so a retried request gets the same verdict without
// running again; a duplicate arriving while the first is running waits for it.
// A failure of the judge itself is an INTERNAL status, never a verdict.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda_agent/config/worker_config.h"
#include "cuda_agent/kernel_eval/judge.h"

namespace cuda_agent::rpc {

class WorkerServer {
 public:
  // Binds `config.listen` (port 0: any free port) and starts serving. Refuses a
  // non-loopback address without a token unless allow_insecure_remote is set.
  static StatusOr<std::unique_ptr<WorkerServer>> Start(const config::WorkerConfig& config,
                                                       std::shared_ptr<kernel_eval::Judge> judge);
  // One judge per GPU: each evaluation goes to the healthy device with the
  // fewest running evaluations; each device times one candidate at a time.
  static StatusOr<std::unique_ptr<WorkerServer>> Start(const config::WorkerConfig& config,
                                                       std::vector<std::shared_ptr<kernel_eval::Judge>> judges);
  ~WorkerServer();

  // "127.0.0.1:43121": the bound address.
  const std::string& address() const;
  // Stops accepting calls; calls still running after `grace_s` are cancelled.
  void Shutdown(double grace_s);
  // Blocks until Shutdown() (from another thread or a signal handler's helper).
  void Wait();

 private:
  WorkerServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True for 127.0.0.0/8, ::1 and "localhost" addresses.
bool IsLoopbackAddress(const std::string& host_port);

}  // namespace cuda_agent::rpc

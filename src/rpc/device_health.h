// Whether a worker's device may be handed the next candidate.
//
// The device is probed (a sandboxed allocation and matmul, Judge::ProbeDevice)
// at start-up, after a verdict that suggests the candidate hurt it (a CUDA
// error or a timeout on the GPU), after a failure of the judge itself, and
// every worker.health_probe_every evaluations if set. It is quarantined when
// the probe fails, when GPU memory held by no process stays behind (nvidia-smi:
// used minus what live processes hold, beyond worker.gpu_memory_slack_mb), or
// when less than worker.min_free_memory_mb is free. A quarantined device is
// probed again every worker.quarantine_recheck_s and released once it passes.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cuda_agent/config/worker_config.h"
#include "cuda_agent/kernel_eval/judge.h"

namespace cuda_agent::rpc {

class DeviceHealth {
 public:
  DeviceHealth(std::shared_ptr<kernel_eval::Judge> judge, const config::WorkerConfig& config);
  ~DeviceHealth();

  // Empty while the device is healthy; otherwise why it is quarantined.
  std::string QuarantineReason() const;
  // Whether the device should be probed after this outcome (`verdict` null:
  // the judge itself failed).
  bool Suspect(const kernel_eval::Verdict* verdict);
  // Probes now; returns the quarantine reason ("" if healthy).
  std::string Probe(const std::string& why);

 private:
  std::string Check();

  std::shared_ptr<kernel_eval::Judge> judge_;
  config::WorkerConfig config_;
  mutable std::mutex mu_;
  std::string reason_;         // guarded by mu_
  int64_t since_probe_ = 0;    // evaluations since the last probe, guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  std::condition_variable cv_;
  std::thread rechecker_;
};

}  // namespace cuda_agent::rpc

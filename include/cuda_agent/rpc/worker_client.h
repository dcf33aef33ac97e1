// Client of the Worker service for trainers and evaluators: plain C++ in and
// out (no protobuf in this header).
//
// Endpoints come from config: "host:port", or "dns:name:port" for every
// address the name resolves to. Each call goes to the least-loaded healthy
// worker. Infrastructure failures (worker unreachable or shut down, queue full,
// device quarantined, the judge failing) are retried on another worker with the
// same idempotency key, within one overall deadline; a request is never turned
// into a verdict it did not get. Thread-safe: one client may serve many
// rollout threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_agent/config/worker_config.h"
#include "cuda_agent/kernel_eval/candidate.h"
#include "cuda_agent/kernel_eval/task.h"
#include "cuda_agent/kernel_eval/verdict.h"
#include "cuda_agent/rpc/workspace.h"

namespace cuda_agent::rpc {

struct EvaluateResult {
  kernel_eval::Verdict verdict;
  std::string worker;                   // who answered
  bool from_idempotency_cache = false;  // a retry answered from the first result
  int attempts = 0;
};

struct DeviceInfo {
  int index = 0;
  std::string name, quarantine_reason;
  int running = 0;
  int64_t evaluations_done = 0;
};

struct WorkerInfo {
  std::string worker, backend, device_name, torch_version, isolation, toolchain;
  int max_concurrent = 0, running = 0, queued = 0, workspaces = 0;
  int64_t evaluations_done = 0;
  int64_t idempotent_hits = 0;
  int64_t build_cache_hits = 0, build_cache_misses = 0;
  int64_t baseline_cache_hits = 0, baseline_cache_misses = 0;
  std::string quarantine_reason;  // empty: some device is healthy
  std::vector<DeviceInfo> devices;
};

// What an agent tool returned: the text it reads and the verdict behind it.
struct ToolResult {
  std::string text;
  kernel_eval::Verdict verdict;  // reward set only by Submit
  std::string worker;
  bool from_idempotency_cache = false;
};

class WorkerClient;

// An agent workspace on one worker, mirrored by the client: when its worker
// fails (unreachable, restarted, quarantined), the workspace is re-created on
// another worker from the mirror and the call is retried there. One agent
// drives one workspace; not for concurrent use.
class RemoteWorkspace {
 public:
  ~RemoteWorkspace();  // closes the workspace on its worker (best effort)

  StatusOr<FileResult> Write(const std::string& path, const std::string& content);
  StatusOr<FileResult> Edit(const std::string& path, const std::string& old_text, const std::string& new_text,
                            bool replace_all = false);
  StatusOr<FileResult> Read(const std::string& path);
  StatusOr<FileResult> List();
  // compile / verify / profile; `key` makes a retried call answer once.
  StatusOr<ToolResult> Run(kernel_eval::Stage tool, const std::string& key);
  // The final, rewarded verdict; the workspace no longer changes afterwards.
  StatusOr<ToolResult> Submit(const std::string& key);
  Status Close();

  const std::string& id() const;
  const std::string& worker() const;  // endpoint holding it now
  int moves() const;                  // times it moved to another worker

 private:
  friend class WorkerClient;
  RemoteWorkspace() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class WorkerClient {
 public:
  static StatusOr<std::unique_ptr<WorkerClient>> Create(const config::ClientConfig& config);
  ~WorkerClient();

  StatusOr<EvaluateResult> Evaluate(const kernel_eval::Task& task, const kernel_eval::Candidate& candidate,
                                    const std::string& idempotency_key);
  // A workspace for `task` holding the initial candidate `files` (path -> content).
  StatusOr<std::unique_ptr<RemoteWorkspace>> OpenWorkspace(const kernel_eval::Task& task,
                                                           const std::map<std::string, std::string>& files);
  StatusOr<WorkerInfo> Info(const std::string& endpoint);
  // Endpoints after DNS expansion.
  std::vector<std::string> endpoints() const;

 private:
  friend class RemoteWorkspace;
  WorkerClient() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the workspaces it opened
};

}  // namespace cuda_agent::rpc

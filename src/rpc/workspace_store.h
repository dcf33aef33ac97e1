// Agent workspaces held by one worker (layout in cuda_agent/rpc/workspace.h):
// a task's reference, the fixed build files and the candidate an agent edits,
// on disk under one root, with limits and idle reaping. Plain C++ (no
// protobuf). A request the agent got wrong is a FileResult with ok=false; a
// Status error means the workspace does not exist or the disk failed.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_agent/config/worker_config.h"
#include "cuda_agent/kernel_eval/candidate.h"
#include "cuda_agent/kernel_eval/task.h"
#include "cuda_agent/rpc/workspace.h"
#include "cuda_agent/util/file.h"
#include "cuda_agent/util/status.h"

namespace cuda_agent::rpc {

// A frozen copy of a workspace's candidate, for one evaluation.
struct Snapshot {
  kernel_eval::Task task;
  kernel_eval::Candidate candidate;
  std::unique_ptr<TempDir> dir;
  std::shared_ptr<void> lease;  // keeps the workspace from being reaped while it runs
};

class WorkspaceStore {
 public:
  // `fixed_dir` holds binding_registry.h and ext_main.cpp. Starts the reaper.
  WorkspaceStore(std::filesystem::path root, std::filesystem::path fixed_dir, const config::WorkerConfig& limits);
  ~WorkspaceStore();

  // A new workspace for `task_source`, with the initial candidate `files`
  // (path -> content). kResourceExhausted past worker.max_workspaces.
  StatusOr<std::string> Create(const std::string& task_name, const std::string& task_source,
                               const std::map<std::string, std::string>& files);
  StatusOr<FileResult> Write(const std::string& id, const std::string& path, const std::string& content);
  StatusOr<FileResult> Edit(const std::string& id, const std::string& path, const std::string& old_text,
                            const std::string& new_text, bool replace_all);
  StatusOr<FileResult> Read(const std::string& id, const std::string& path);
  StatusOr<FileResult> List(const std::string& id);
  // Copies the candidate for an evaluation; `submit` freezes the workspace
  // (later writes are refused). A FileResult error if there is nothing to run.
  StatusOr<Snapshot> Snap(const std::string& id, bool submit, std::string* refused);
  Status Close(const std::string& id);

  size_t size() const;
  // Removes workspaces idle past worker.workspace_idle_s or older than
  // worker.workspace_max_s; returns how many. The reaper thread calls it.
  size_t Reap();

 private:
  struct Workspace {
    std::mutex mu;
    std::filesystem::path dir;  // task/, cand/
    std::string task_name;
    std::chrono::steady_clock::time_point created, used;
    bool submitted = false;
    int running = 0;  // evaluations of snapshots in flight
  };
  StatusOr<std::shared_ptr<Workspace>> Get(const std::string& id);
  int64_t CandidateBytes(const Workspace& ws, const std::string& except, int64_t* files) const;
  // The file behind an agent path, and whether it is read-only; empty if none.
  std::filesystem::path Resolve(const Workspace& ws, const std::string& path, bool* read_only) const;
  FileResult CheckedWrite(Workspace& ws, const std::string& path, const std::string& content);

  std::filesystem::path root_, fixed_dir_;
  config::WorkerConfig limits_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Workspace>> workspaces_;  // guarded by mu_
  uint64_t next_id_ = 0;                                          // guarded by mu_
  bool stopping_ = false;                                         // guarded by mu_
  std::condition_variable stop_cv_;
  std::thread reaper_;
};

}  // namespace cuda_agent::rpc

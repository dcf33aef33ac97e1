// The judge: compiles, verifies and times one candidate against its task and
// returns a Verdict (DESIGN.md §4-5). Candidate code only ever runs in sandboxed
// processes; the verdict is decided here, from files and messages.
//
//   auto judge = Judge::Create(config.judge, config.sandbox);
//   auto verdict = (*judge)->Evaluate(task, candidate);
//
// A bad kernel is a verdict; a failure of the judge itself (the reference
// failed, a disk filled, the harness died unexpectedly) is an error Status.
// Thread-safe: Evaluate() may run concurrently (distinct scratch directories).
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_agent/config/judge_config.h"
#include "cuda_agent/config/sandbox_config.h"
#include "cuda_agent/kernel_eval/baseline_cache.h"
#include "cuda_agent/kernel_eval/candidate.h"
#include "cuda_agent/kernel_eval/task.h"
#include "cuda_agent/kernel_eval/verdict.h"
#include "cuda_agent/sandbox/sandbox.h"

namespace cuda_agent::kernel_eval {

// What the judge found out about its Python and device at start-up.
struct PythonEnv {
  std::string executable;                       // the real interpreter (not a shim)
  std::vector<std::filesystem::path> readable;  // directories harness processes must read
  std::string torch_version;
  bool cuda_available = false;
  std::string device_name;  // GPU name, or "cpu"
  std::string cuda_arch;    // "sm_90"
};

// The answer of a device health probe (a sandboxed allocation and matmul).
struct DeviceProbe {
  bool ok = false;
  std::string message;  // why not ok
  int64_t free_mb = 0;  // free device memory (CPU: MemAvailable)
  int64_t total_mb = 0;
};

// Counters since start-up, for the worker's Info.
struct JudgeStats {
  int64_t build_cache_hits = 0, build_cache_misses = 0;
  int64_t baseline_cache_hits = 0, baseline_cache_misses = 0;
};

class Judge {
 public:
  static StatusOr<std::unique_ptr<Judge>> Create(const config::JudgeConfig& judge,
                                                 const config::SandboxConfig& sandbox);

  // `cancelled` (optional) is polled a few times a second; once it returns true
  // the sandboxes are killed and the call returns kCancelled. `stop_after`
  // ends early for an agent's compile/verify tools; only kProfile earns a reward.
  StatusOr<Verdict> Evaluate(const Task& task, const Candidate& candidate, std::function<bool()> cancelled = nullptr,
                             Stage stop_after = Stage::kProfile);

  // Allocates and computes on the device in a sandbox, after any timing in
  // progress. An error only if the probe could not be run at all.
  StatusOr<DeviceProbe> ProbeDevice();

  JudgeStats stats() const;
  // "c++ (Debian 12.2.0-14) 12.2.0; Cuda compilation tools, release 13.0, V13.0.48; sm_90"
  const std::string& toolchain() const { return toolchain_; }
  const std::string& backend() const { return backend_; }
  const PythonEnv& python() const { return python_; }
  const sandbox::Sandbox& sandbox() const { return *sandbox_; }
  const config::JudgeConfig& config() const { return config_; }
  const std::filesystem::path& harness_dir() const { return harness_dir_; }

 private:
  friend class Evaluation;
  Judge() = default;
  // Builds the precompiled torch header once per flags/torch/compiler; returns
  // at once while another thread builds it.
  Status EnsurePch();

  config::JudgeConfig config_;
  std::unique_ptr<sandbox::Sandbox> sandbox_;
  PythonEnv python_;
  std::string backend_;  // "cuda" or "cpu"
  std::filesystem::path harness_dir_;
  std::filesystem::path work_root_;
  std::filesystem::path cache_dir_;
  std::unique_ptr<BaselineCache> baselines_;
  std::mutex timing_mu_;  // one timing phase at a time: concurrent timing would skew both
  std::mutex pch_mu_;
  bool pch_ready_ = false;  // guarded by pch_mu_
  std::string toolchain_;
  std::atomic<int64_t> build_hits_{0}, build_misses_{0}, baseline_hits_{0}, baseline_misses_{0};
};

}  // namespace cuda_agent::kernel_eval

// One run of the judge on one candidate: the phases of Judge::Evaluate and the
// state they share (scratch directory, harness processes, the verdict so far).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_agent/kernel_eval/judge.h"
#include "cuda_agent/util/file.h"
#include "harness_process.h"

namespace cuda_agent::kernel_eval {

// Seconds since `since`; the time point `seconds` from now.
inline double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }
inline Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

class Evaluation {
 public:
  Evaluation(Judge& judge, const Task& task, const Candidate& candidate, Stage stop_after,
             std::function<bool()> cancelled);
  ~Evaluation();

  // Lint -> compile (the reference starts alongside) -> verify -> profile, up
  // to `stop_after`. Stops at the first phase that decides the verdict.
  StatusOr<Verdict> Run();

  // Builds the judge's precompiled torch header in a sandbox (called once).
  static Status BuildPch(Judge& judge);
  // Runs the harness's device probe in a sandbox.
  static StatusOr<DeviceProbe> ProbeDevice(Judge& judge);

 private:
  // Each phase returns true when it decided the verdict, false to go on, or an
  // error when the judge itself failed.
  Status Prepare();
  StatusOr<bool> Lint();
  StatusOr<bool> StartReference();
  StatusOr<bool> Compile();
  StatusOr<bool> AwaitReference();
  StatusOr<bool> Verify();
  StatusOr<bool> Profile();

  bool Decide(Outcome outcome, std::string message);
  // Decides the verdict of a candidate process that stopped talking.
  bool DecideFromExit(HarnessProcess& process, const Status& why, bool compiling);
  // Compares every output of check `tag`; records a CheckResult. False on mismatch.
  StatusOr<bool> CompareCheck(const std::string& tag, const nlohmann::json& ref_outputs, size_t cand_outputs,
                              const std::string& cand_prefix, bool samples);
  StatusOr<std::unique_ptr<HarnessProcess>> StartHarness(const std::string& name, const std::string& mode,
                                                         nlohmann::json spec, std::vector<sandbox::Bind> binds,
                                                         bool gpu);
  // The next message, polling the cancellation check; kCancelled once it fires.
  StatusOr<nlohmann::json> Receive(HarnessProcess& process, Clock::time_point deadline);
  // Copies a cached build of this candidate into cand/build; false on a miss.
  bool RestoreCachedBuild(const std::string& key);
  void StoreCachedBuild(const std::string& key);
  std::string BuildCacheKey() const;
  // Sends `command` and waits for the matching event; an "error" event is returned too.
  StatusOr<nlohmann::json> Ask(HarnessProcess& process, const nlohmann::json& command, const std::string& event,
                               Clock::time_point deadline);
  nlohmann::json CommonSpec() const;
  nlohmann::json CandidateSpec() const;
  void Mark(const std::string& phase, Clock::time_point since);

  Judge& judge_;
  const Task& task_;
  const Candidate& candidate_;
  Stage stop_after_;
  Verdict verdict_;
  Clock::time_point reference_start_;
  std::optional<TempDir> dir_;
  std::filesystem::path eval_dir_, task_copy_, cand_dir_, cand_module_, ref_dir_, logs_dir_;
  std::unique_ptr<HarnessProcess> reference_, candidate_process_;
  nlohmann::json ref_ready_;
  int64_t seed_ = 0;
  std::function<bool()> cancelled_;
  bool was_cancelled_ = false;
  std::mt19937_64 rng_;
};

}  // namespace cuda_agent::kernel_eval

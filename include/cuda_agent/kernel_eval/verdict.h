// The judge's verdict on one candidate (DESIGN.md §4): a typed outcome, the
// evidence behind it, timings, speedups, environment and reward.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cuda_agent::kernel_eval {

enum class Outcome {
  kOk,              // compiled, correct on every check, timed
  kCompileError,    // the build (or the import of model_new.py) failed
  kCompileTimeout,  // the build ran past compile_timeout_s
  kRuntimeError,    // crashed, raised, or was killed by a resource limit
  kIncorrect,       // wrong values, dtype, shape or output type
  kTimeout,         // verification or timing ran past run_timeout_s
  kForbidden,       // a detected cheat: PyTorch compute, tampering, forged timing, ...
};

const char* OutcomeName(Outcome outcome);

// How far an evaluation went: an agent's tools stop after compiling or after
// the correctness checks; a submission goes through timing.
enum class Stage { kCompile, kVerify, kProfile };

const char* StageName(Stage stage);
bool ParseStage(const std::string& name, Stage* stage);
bool ParseOutcome(const std::string& name, Outcome* outcome);

// Statistics of one implementation's timed calls, milliseconds.
struct TimingStats {
  double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0, stddev_ms = 0;
  int trials = 0;
  double wall_ms = 0;   // trusted wall clock of the whole timed loop, from the judge's side
  bool cached = false;  // taken from the baseline cache
  static TimingStats FromSamples(std::vector<double> times_ms);
  nlohmann::json ToJson() const;
};

// One correctness check.
struct CheckResult {
  std::string tag;  // check_0.., variant_x3, post_0..
  bool passed = false;
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::string message;  // why it failed
};

struct Verdict {
  Outcome outcome = Outcome::kRuntimeError;
  std::string message;  // one line: why this outcome
  double reward = 0;    // 0 unless stage is profile
  std::string stage = "profile";

  std::string compile_log;  // truncated compiler / import output
  std::vector<std::string> compile_commands;
  std::string run_log;  // truncated stderr of the candidate's process on failure
  std::vector<CheckResult> checks;

  bool timed = false;
  TimingStats eager, compiled, candidate;
  double speedup_vs_eager = 0;    // t_eager / t_candidate (medians)
  double speedup_vs_compile = 0;  // t_compile / t_candidate

  std::vector<std::string> cheats;    // evidence for kForbidden
  std::vector<std::string> warnings;  // e.g. a degenerate task
  std::map<std::string, double> phase_seconds;
  nlohmann::json environment;  // backend, device, torch, CUDA, TF32, isolation, flags

  nlohmann::json ToJson() const;
  // A few human-readable lines.
  std::string Summary() const;
  // What an agent reads after running a tool: the outcome, then the compiler
  // output, failed checks or timings that explain it.
  std::string AgentReport() const;
};

}  // namespace cuda_agent::kernel_eval

#include "cuda_agent/kernel_eval/verdict.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace cuda_agent::kernel_eval {

namespace {
constexpr std::pair<Outcome, const char*> kNames[] = {
    {Outcome::kOk, "OK"},
    {Outcome::kCompileError, "COMPILE_ERROR"},
    {Outcome::kCompileTimeout, "COMPILE_TIMEOUT"},
    {Outcome::kRuntimeError, "RUNTIME_ERROR"},
    {Outcome::kIncorrect, "INCORRECT"},
    {Outcome::kTimeout, "TIMEOUT"},
    {Outcome::kForbidden, "FORBIDDEN"},
};
}  // namespace

const char* OutcomeName(Outcome outcome) {
  for (const auto& [o, name] : kNames)
    if (o == outcome) return name;
  return "UNKNOWN";
}

bool ParseOutcome(const std::string& name, Outcome* outcome) {
  for (const auto& [o, n] : kNames) {
    if (name == n) {
      *outcome = o;
      return true;
    }
  }
  return false;
}

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kCompile:
      return "compile";
    case Stage::kVerify:
      return "verify";
    case Stage::kProfile:
      return "profile";
  }
  return "unknown";
}

bool ParseStage(const std::string& name, Stage* stage) {
  for (Stage s : {Stage::kCompile, Stage::kVerify, Stage::kProfile}) {
    if (name == StageName(s)) {
      *stage = s;
      return true;
    }
  }
  return false;
}

TimingStats TimingStats::FromSamples(std::vector<double> times_ms) {
  TimingStats s;
  s.trials = static_cast<int>(times_ms.size());
  if (times_ms.empty()) return s;
  std::sort(times_ms.begin(), times_ms.end());
  size_t n = times_ms.size();
  s.median_ms = n % 2 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]);
  s.min_ms = times_ms.front();
  s.max_ms = times_ms.back();
  double sum = 0;
  for (double t : times_ms) sum += t;
  s.mean_ms = sum / static_cast<double>(n);
  double var = 0;
  for (double t : times_ms) var += (t - s.mean_ms) * (t - s.mean_ms);
  s.stddev_ms = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0;
  return s;
}

nlohmann::json TimingStats::ToJson() const {
  return {{"median_ms", median_ms}, {"min_ms", min_ms}, {"max_ms", max_ms},   {"mean_ms", mean_ms},
          {"stddev_ms", stddev_ms}, {"trials", trials}, {"wall_ms", wall_ms}, {"cached", cached}};
}

nlohmann::json Verdict::ToJson() const {
  nlohmann::json j;
  j["outcome"] = OutcomeName(outcome);
  j["stage"] = stage;
  j["message"] = message;
  j["reward"] = reward;
  j["compile"] = {{"log", compile_log}, {"commands", compile_commands}};
  j["run_log"] = run_log;
  j["checks"] = nlohmann::json::array();
  for (const auto& c : checks)
    j["checks"].push_back({{"tag", c.tag},
                           {"passed", c.passed},
                           {"max_abs_error", c.max_abs_error},
                           {"max_rel_error", c.max_rel_error},
                           {"message", c.message}});
  j["timed"] = timed;
  if (timed) {
    j["timing"] = {{"eager", eager.ToJson()}, {"torch_compile", compiled.ToJson()}, {"candidate", candidate.ToJson()}};
    j["speedup_vs_eager"] = speedup_vs_eager;
    j["speedup_vs_compile"] = speedup_vs_compile;
  }
  j["cheats"] = cheats;
  j["warnings"] = warnings;
  j["phase_seconds"] = phase_seconds;
  j["environment"] = environment;
  return j;
}

std::string Verdict::Summary() const {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3);
  s << OutcomeName(outcome) << "  reward " << reward << "\n";
  if (!message.empty()) s << "  " << message << "\n";
  if (timed) {
    s << "  candidate " << candidate.median_ms << " ms  eager " << eager.median_ms << " ms  torch.compile "
      << compiled.median_ms << " ms  (medians of " << candidate.trials << ")\n";
    s << "  speedup " << speedup_vs_eager << "x vs eager, " << speedup_vs_compile << "x vs torch.compile\n";
  }
  for (const auto& c : cheats) s << "  cheat: " << c << "\n";
  for (const auto& w : warnings) s << "  warning: " << w << "\n";
  if (outcome == Outcome::kCompileError && !compile_log.empty()) {
    std::string tail = compile_log.size() > 2000 ? compile_log.substr(compile_log.size() - 2000) : compile_log;
    s << "  compiler output (tail):\n" << tail << "\n";
  }
  s << "  phases:";
  for (const auto& [k, v] : phase_seconds) s << " " << k << " " << std::setprecision(1) << v << "s";
  s << "\n";
  return s.str();
}

std::string Verdict::AgentReport() const {
  std::ostringstream s;
  s << std::fixed << std::setprecision(4);
  s << stage << ": " << OutcomeName(outcome) << " - " << message << "\n";
  auto tail = [](const std::string& text, size_t n) { return text.size() > n ? "..." + text.substr(text.size() - n) : text; };
  if ((outcome == Outcome::kCompileError || outcome == Outcome::kCompileTimeout) && !compile_log.empty())
    s << "compiler output:\n" << tail(compile_log, 6000) << "\n";
  if (outcome == Outcome::kRuntimeError || outcome == Outcome::kTimeout)
    if (!run_log.empty()) s << "process output:\n" << tail(run_log, 4000) << "\n";
  for (const auto& c : checks) {
    s << "check " << c.tag << ": " << (c.passed ? "passed" : "FAILED") << " (max abs error " << c.max_abs_error
      << ", max rel error " << c.max_rel_error << ")";
    if (!c.message.empty() && !c.passed) s << ": " << c.message;
    s << "\n";
  }
  for (const auto& c : cheats) s << "forbidden: " << c << "\n";
  if (timed) {
    s << "candidate " << candidate.median_ms << " ms (median of " << candidate.trials << "), eager " << eager.median_ms
      << " ms, torch.compile " << compiled.median_ms << " ms\n";
    s << std::setprecision(2) << "speedup " << speedup_vs_eager << "x vs eager, " << speedup_vs_compile
      << "x vs torch.compile\n";
  }
  return s.str();
}

}  // namespace cuda_agent::kernel_eval

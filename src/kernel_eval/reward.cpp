#include "cuda_agent/kernel_eval/reward.h"

namespace cuda_agent::kernel_eval {

bool ParseRewardKind(const std::string& name, RewardKind* kind) {
  if (name == "milestone")
    *kind = RewardKind::kMilestone;
  else if (name == "speedup")
    *kind = RewardKind::kSpeedup;
  else if (name == "kevin")
    *kind = RewardKind::kKevin;
  else
    return false;
  return true;
}

bool FasterThan(double t_candidate_ms, double t_base_ms, double margin) {
  if (t_base_ms <= 0) return false;
  return (t_base_ms - t_candidate_ms) / t_base_ms > margin;
}

double ComputeReward(const Verdict& verdict, RewardKind kind, double margin) {
  bool correct = verdict.outcome == Outcome::kOk;
  switch (kind) {
    case RewardKind::kMilestone: {
      if (!correct) return -1;
      if (!verdict.timed) return 1;
      bool beats_eager = FasterThan(verdict.candidate.median_ms, verdict.eager.median_ms, margin);
      bool beats_compile = FasterThan(verdict.candidate.median_ms, verdict.compiled.median_ms, margin);
      if (beats_eager && beats_compile) return 3;
      if (beats_eager) return 2;
      return 1;
    }
    case RewardKind::kSpeedup:
      return correct ? verdict.speedup_vs_eager : -1;
    case RewardKind::kKevin:
      return correct ? 0.3 + verdict.speedup_vs_eager : 0;
  }
  return -1;
}

}  // namespace cuda_agent::kernel_eval

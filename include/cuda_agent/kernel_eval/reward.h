// Rewards from verdicts (DESIGN.md §4, "Reward").
#pragma once

#include <string>

#include "cuda_agent/kernel_eval/verdict.h"

namespace cuda_agent::kernel_eval {

enum class RewardKind {
  kMilestone,  // paper: -1 fail; +1 correct; +2 >margin faster than eager; +3 also than torch.compile
  kSpeedup,    // -1 fail; otherwise the speedup over eager
  kKevin,      // 0.3 * correct + speedup * correct (Kevin)
};

bool ParseRewardKind(const std::string& name, RewardKind* kind);

// "More than `margin` faster": (t_base - t) / t_base > margin.
bool FasterThan(double t_candidate_ms, double t_base_ms, double margin);

// The reward of a verdict. Only kOk verdicts can score above -1 (or 0 for kKevin).
double ComputeReward(const Verdict& verdict, RewardKind kind, double margin);

}  // namespace cuda_agent::kernel_eval

// The one data type between rollout and update (CONVENTIONS.md §9): a batch of
// trajectories as right-padded token rows, with everything the learner needs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace cuda_agent::rl {

struct RolloutBatch {
  at::Tensor tokens;        // (B, T) int64: prompt, responses and tool outputs, right-padded
  at::Tensor action_mask;   // (B, T) bool: tokens the policy sampled (the only ones with loss)
  at::Tensor old_logprobs;  // (B, T) float32: the sampler's logprob of each action token, 0 elsewhere
  at::Tensor rewards;       // (B, T) float32: rewards on action tokens (the outcome on the last one)
  at::Tensor scores;        // (B,) float32: each trajectory's total reward (group estimators)
  at::Tensor groups;        // (B,) int64: the prompt each trajectory answers
  // Filled by Learner::ComputeAdvantages:
  at::Tensor advantages;  // (B, T) float32
  at::Tensor returns;     // (B, T) float32: critic targets (GAE)
  at::Tensor old_values;  // (B, T) float32: the critic's values before the update

  int64_t size() const { return tokens.defined() ? tokens.size(0) : 0; }
  // Rows [begin, begin + n), sharing storage.
  RolloutBatch Slice(int64_t begin, int64_t n) const;
  // Rows where `keep` (B,) bool is true.
  RolloutBatch Select(const at::Tensor& keep) const;
};

}  // namespace cuda_agent::rl

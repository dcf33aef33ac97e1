// The one data type between rollout and update (CONVENTIONS.md §9): a batch of
// trajectories as right-padded token rows, with everything the learner needs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

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
  // Every tensor on `device`.
  RolloutBatch To(c10::Device device) const;
  // Rows where `keep` (B,) bool is true.
  RolloutBatch Select(const at::Tensor& keep) const;
  // DAPO's overlong filtering: rows where `rows` (B,) bool is true (truncated
  // responses) keep their place but carry no loss.
  void DropLoss(const at::Tensor& rows);
  // Rows of all `parts`, right-padded to the longest; group ids are renumbered
  // so groups of different parts stay apart.
  static RolloutBatch Concat(const std::vector<RolloutBatch>& parts);
};

// DAPO's dynamic sampling (Yu et al., 2025): keeps only groups whose rewards
// differ, and asks for another round of sampling until `target_groups` are
// kept or `max_rounds` rounds ran.
//
//   DynamicSampler sampler(64, 8);
//   while (!sampler.Done()) sampler.Add(SampleRound());
//   RolloutBatch batch = sampler.Take();
class DynamicSampler {
 public:
  DynamicSampler(int64_t target_groups, int64_t max_rounds);
  void Add(const RolloutBatch& round);
  bool Done() const { return kept_groups_ >= target_groups_ || rounds_ >= max_rounds_; }
  // The kept groups (at most target_groups), and a fresh start.
  RolloutBatch Take();
  int64_t kept_groups() const { return kept_groups_; }
  int64_t dropped_groups() const { return dropped_groups_; }
  int64_t rounds() const { return rounds_; }

 private:
  int64_t target_groups_, max_rounds_;
  std::vector<RolloutBatch> kept_;
  int64_t kept_groups_ = 0, dropped_groups_ = 0, rounds_ = 0;
};

}  // namespace cuda_agent::rl

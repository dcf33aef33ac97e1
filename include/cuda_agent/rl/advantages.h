// Advantage estimators (DESIGN.md §6). Plain functions chosen by the learner's
// config; each names its formula and paper. Shapes: B sequences, T tokens;
// `mask` (B, T) bool is true on the model's own (action) tokens only, so
// prompt, tool-output and padding tokens never carry an advantage.
#pragma once

#include <ATen/core/Tensor.h>

namespace cuda_agent::rl {

enum class AdvantageEstimator {
  kGae,        // PPO with a critic
  kGrpo,       // group-normalised, divided by the group's std (GRPO)
  kGrpoNoStd,  // group-normalised without the std division (Dr. GRPO / DAPO variant)
  kRloo,       // leave-one-out baseline
};

// GAE (Schulman et al., 2016) along each row's action tokens, skipping the
// others: for successive action tokens t < t' of a row,
//   delta_t = r_t + gamma * V_t' - V_t,   A_t = delta_t + gamma * lambda * A_t'
// with V and A zero after the row's last action token. Multi-turn trajectories
// thus chain across tool outputs. rewards, values: (B, T) float; returns A
// (B, T) float32, zero off the mask; `*returns` = A + V on the mask (critic
// targets), zero elsewhere.
at::Tensor GaeAdvantages(const at::Tensor& rewards, const at::Tensor& values, const at::Tensor& mask, double gamma,
                         double lambda, at::Tensor* returns);

// GRPO (Shao et al., 2024): (s_i - mean_g) / (std_g + eps) over the members of
// i's group g (std unbiased; 0 for a group of one); without the division when
// `divide_by_std` is false. scores: (N,) float; groups: (N,) int64. -> (N,).
at::Tensor GroupNormalizedAdvantages(const at::Tensor& scores, const at::Tensor& groups, bool divide_by_std,
                                     double eps = 1e-6);

// RLOO (Ahmadian et al., 2024): s_i minus the mean of the other members of its
// group (0 for a group of one). -> (N,).
at::Tensor RlooAdvantages(const at::Tensor& scores, const at::Tensor& groups);

// A per-sequence advantage (N,) on each of its action tokens: (N, T) float32.
at::Tensor TokenAdvantages(const at::Tensor& per_sequence, const at::Tensor& mask);

// DAPO dynamic sampling (Yu et al., 2025): true for members of groups whose
// scores are not all equal (such groups carry no gradient). -> (N,) bool.
at::Tensor GroupsWithSpread(const at::Tensor& scores, const at::Tensor& groups);

// DAPO's soft overlong punishment, added to the reward of a response of
// `length` tokens: 0 up to max_length - cache_length, then linear down to -1
// at max_length, -1 beyond.
double OverlongPenalty(int64_t length, int64_t max_length, int64_t cache_length);

}  // namespace cuda_agent::rl

// Losses of the learner (DESIGN.md §6), as plain functions of (B, T) tensors.
// `mask` (B, T) bool marks the model's own tokens. Every loss is normalised by
// counts of the *global* batch (LossScale), so the losses of micro-batches sum
// to the loss of the whole batch, and so do their gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include "cuda_agent/model/fused_ops.h"

namespace cuda_agent::rl {

enum class LossAggregation {
  kTokenMean,     // sum over all action tokens / their number in the batch (DAPO)
  kSequenceMean,  // mean over sequences of each sequence's token mean (GRPO)
};

// The global batch's counts: action tokens, and sequences with at least one.
struct LossScale {
  double tokens = 1;
  double sequences = 1;
};

LossScale ScaleOf(const at::Tensor& mask);

// Scalar: per_token (B, T) aggregated over the mask with the global scale.
at::Tensor Aggregate(const at::Tensor& per_token, const at::Tensor& mask, LossAggregation mode, const LossScale& scale);

struct PolicyLossConfig {
  double clip_low = 0.2;    // ratio floor 1 - clip_low
  double clip_high = 0.28;  // ratio ceiling 1 + clip_high (clip-higher, DAPO)
  double dual_clip = 0;     // c > 1 bounds the loss of negative advantages by -c*A (Ye et al., 2020); 0: off
  LossAggregation aggregation = LossAggregation::kTokenMean;
};

// Diagnostics over this batch's action tokens.
struct PolicyLossStats {
  double clip_fraction_low = 0, clip_fraction_high = 0, dual_clip_fraction = 0;
  double approx_kl = 0;  // mean of 0.5 * (logp - old_logp)^2
  double ratio_mean = 0, ratio_max = 0, ratio_min = 0;
};

// PPO's clipped surrogate with separate clip bounds:
//   r = exp(logp - old_logp),  loss_t = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)
// (and min(loss_t, -c A) where A < 0 with dual clip). logprobs carries the
// gradient; old_logprobs (the behaviour policy's) and advantages do not.
at::Tensor PolicyLoss(const at::Tensor& logprobs, const at::Tensor& old_logprobs, const at::Tensor& advantages,
                      const at::Tensor& mask, const PolicyLossConfig& config, const LossScale& scale,
                      PolicyLossStats* stats = nullptr);

// PPO's clipped value loss: 0.5 max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2).
// `*clip_fraction`: share of action tokens where the clipped term is larger.
at::Tensor ValueLoss(const at::Tensor& values, const at::Tensor& old_values, const at::Tensor& returns,
                     const at::Tensor& mask, double clip_eps, LossAggregation mode, const LossScale& scale,
                     double* clip_fraction = nullptr);

// log p(tokens[b, t]) under logits[b, t] and the entropy of that distribution:
// logits (B, T, V) of any dtype, tokens (B, T) int64 -> (B, T) float32 each,
// differentiable (one fused pass over the logits on CUDA: model/fused_ops.h).
model::TokenLogprobs TokenLogprobsAndEntropy(const at::Tensor& logits, const at::Tensor& tokens);

enum class KlEstimator {
  kK1,  // logp - ref_logp
  kK3,  // exp(ref - logp) - (ref - logp) - 1, unbiased and non-negative (Schulman, 2020)
};
at::Tensor KlPenalty(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, KlEstimator estimator);

// 1 - Var(R - V) / Var(R) over the action tokens (unbiased variances).
double ExplainedVariance(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& mask);

}  // namespace cuda_agent::rl

// The learner: PPO with a critic, or critic-free GRPO/DAPO, plus the
// supervised stages (rejection fine-tuning, critic value pretraining), on a
// RolloutBatch, data-parallel over a Communicator (DESIGN.md §6-7).
//
// Each rank passes its own share of the global batch (whole groups). Losses
// are normalised by the global batch's counts and gradients are summed over
// ranks, so any split over ranks and micro-batches gives the full-batch
// gradient.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "cuda_agent/model/transformer.h"
#include "cuda_agent/rl/advantages.h"
#include "cuda_agent/rl/communicator.h"
#include "cuda_agent/rl/gradient_buckets.h"
#include "cuda_agent/rl/losses.h"
#include "cuda_agent/rl/optimizer.h"
#include "cuda_agent/rl/rollout_batch.h"

namespace cuda_agent::rl {

struct LearnerConfig {
  AdvantageEstimator estimator = AdvantageEstimator::kGae;
  double gamma = 1.0, lambda = 0.95;
  PolicyLossConfig policy;
  double value_clip = 0.2;
  double entropy_coef = 0;  // bonus weight; 0: off
  double kl_coef = 0;       // penalty weight to the reference policy; 0: off (DAPO)
  KlEstimator kl_estimator = KlEstimator::kK3;
  int64_t micro_batch_size = 8;  // rows per forward/backward
  int64_t mini_batches = 1;      // optimizer steps per epoch over the batch
  int64_t epochs = 1;
  double bucket_mb = 25;  // gradient all-reduce bucket size (reduced while backward runs)
  OptimizerConfig actor, critic;
};

// Means over the update's action tokens (rank-local diagnostics).
struct UpdateMetrics {
  std::map<std::string, double> values;
  double& operator[](const std::string& k) { return values[k]; }
};

class Learner {
 public:
  // `critic` (with a value head) is required for GAE; `reference` only with
  // kl_coef > 0; `comm` null means one rank. All must outlive the learner.
  Learner(model::Transformer& policy, model::Transformer* critic, const model::Transformer* reference,
          const LearnerConfig& config, Communicator* comm = nullptr);

  // Fills advantages, returns and old_values (GAE: from the critic).
  void ComputeAdvantages(RolloutBatch& batch);
  // epochs x mini_batches clipped policy (and value) updates.
  UpdateMetrics Update(RolloutBatch& batch);
  // Rejection fine-tuning: cross-entropy on the action tokens of kept trajectories.
  UpdateMetrics FineTune(const RolloutBatch& batch);
  // Critic value pretraining on the batch's GAE returns (policy untouched).
  UpdateMetrics PretrainCritic(RolloutBatch& batch);

  // Logprob of each token under `model` (position t: predicted from t - 1; 0 at t = 0).
  static at::Tensor SequenceLogprobs(const model::Transformer& model, const at::Tensor& tokens);
  // The value head's estimate before each token (shifted the same way).
  static at::Tensor SequenceValues(const model::Transformer& model, const at::Tensor& tokens);

  AdamW& actor_optimizer() { return *actor_opt_; }
  AdamW* critic_optimizer() { return critic_opt_.get(); }

 private:
  LossScale GlobalScale(const at::Tensor& mask);
  // One optimizer step on a token-mean loss over the batch's action tokens
  // (rejection fine-tuning, critic pretraining); metric `name` is its mean.
  UpdateMetrics Supervised(const RolloutBatch& batch, GradientBuckets& grads, AdamW& optimizer,
                           const std::string& name,
                           const std::function<at::Tensor(const RolloutBatch&)>& per_token_loss);

  model::Transformer& policy_;
  model::Transformer* critic_;
  const model::Transformer* reference_;
  LearnerConfig config_;
  std::unique_ptr<Communicator> single_;
  Communicator* comm_;
  std::unique_ptr<AdamW> actor_opt_, critic_opt_;
  std::unique_ptr<GradientBuckets> actor_grads_, critic_grads_;
};

}  // namespace cuda_agent::rl

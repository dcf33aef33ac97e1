#include "cuda_agent/rl/learner.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <functional>

namespace cuda_agent::rl {
namespace {

std::vector<at::Tensor> Parameters(const model::Transformer& model) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : model.parameters()) out.push_back(p);
  return out;
}

at::Tensor Positions(const at::Tensor& tokens) {
  return at::arange(tokens.size(1), tokens.options()).expand({tokens.size(0), tokens.size(1)});
}

// Shifts per-position quantities one step right: out[:, t] = in[:, t - 1], out[:, 0] = 0.
at::Tensor ShiftRight(const at::Tensor& x) {
  return at::cat({at::zeros_like(x.narrow(1, 0, 1)), x.narrow(1, 0, x.size(1) - 1)}, 1);
}

void Accumulate(UpdateMetrics* m, const std::string& key, double value, double weight) {
  (*m)[key + ".sum"] += value * weight;
  (*m)[key + ".weight"] += weight;
}

// Per position t of tokens (B, T): the logprob of tokens[:, t] under the
// model's distribution at t - 1, and that distribution's entropy; 0 at t = 0.
model::TokenLogprobs ShiftedLogprobs(const at::Tensor& logits, const at::Tensor& tokens) {
  // Position t predicts tokens[:, t + 1]; the last position's target is a
  // placeholder (its outputs are dropped), so the logits need no copy.
  const int64_t T = tokens.size(1);
  at::Tensor targets = at::cat({tokens.narrow(1, 1, T - 1), tokens.narrow(1, T - 1, 1)}, 1);
  auto out = TokenLogprobsAndEntropy(logits, targets);
  return {ShiftRight(out.logprobs), ShiftRight(out.entropy)};
}

// Turns the .sum/.weight pairs into weighted means.
UpdateMetrics Finish(UpdateMetrics m) {
  UpdateMetrics out;
  for (const auto& [k, v] : m.values) {
    if (k.size() > 4 && k.compare(k.size() - 4, 4, ".sum") == 0) {
      std::string key = k.substr(0, k.size() - 4);
      double w = m.values[key + ".weight"];
      out[key] = w > 0 ? v / w : 0;
    } else if (k.find(".weight") == std::string::npos) {
      out[k] = v;
    }
  }
  return out;
}

}  // namespace

Learner::Learner(model::Transformer& policy, model::Transformer* critic, const model::Transformer* reference,
                 const LearnerConfig& config, Communicator* comm)
    : policy_(policy), critic_(critic), reference_(reference), config_(config), comm_(comm) {
  if (comm_ == nullptr) {
    single_ = Communicator::Single();
    comm_ = single_.get();
  }
  for (const auto& [name, p] : policy_.parameters()) p.set_requires_grad(true);
  actor_opt_ = std::make_unique<AdamW>(Parameters(policy_), config_.actor, comm_);
  actor_grads_ = std::make_unique<GradientBuckets>(Parameters(policy_), comm_, config_.bucket_mb);
  if (critic_ != nullptr) {
    for (const auto& [name, p] : critic_->parameters()) p.set_requires_grad(true);
    critic_opt_ = std::make_unique<AdamW>(Parameters(*critic_), config_.critic, comm_);
    critic_grads_ = std::make_unique<GradientBuckets>(Parameters(*critic_), comm_, config_.bucket_mb);
  }
}

at::Tensor Learner::SequenceLogprobs(const model::Transformer& model, const at::Tensor& tokens) {
  return ShiftedLogprobs(model.Forward(tokens, Positions(tokens)), tokens).logprobs;
}

at::Tensor Learner::SequenceValues(const model::Transformer& model, const at::Tensor& tokens) {
  at::Tensor values;
  model.Forward(tokens, Positions(tokens), nullptr, {}, &values);
  return ShiftRight(values.to(at::kFloat));
}

LossScale Learner::GlobalScale(const at::Tensor& mask) {
  LossScale local = ScaleOf(mask);
  // On the model's device: NCCL reduces only GPU tensors.
  std::vector<at::Tensor> counts{at::tensor({local.tokens, local.sequences}, at::kDouble).to(policy_.options().device)};
  comm_->AllReduceSum(counts);
  return {counts[0][0].item<double>(), counts[0][1].item<double>()};
}

void Learner::ComputeAdvantages(RolloutBatch& batch) {
  c10::NoGradGuard no_grad;
  at::Tensor mask = batch.action_mask.to(at::kBool);
  batch.old_values = at::zeros_like(batch.old_logprobs);
  switch (config_.estimator) {
    case AdvantageEstimator::kGae: {
      TORCH_CHECK(critic_ != nullptr, "GAE needs a critic");
      batch.old_values = SequenceValues(*critic_, batch.tokens) * mask;
      batch.advantages =
          GaeAdvantages(batch.rewards, batch.old_values, mask, config_.gamma, config_.lambda, &batch.returns);
      return;
    }
    case AdvantageEstimator::kGrpo:
    case AdvantageEstimator::kGrpoNoStd:
      batch.advantages = TokenAdvantages(
          GroupNormalizedAdvantages(batch.scores, batch.groups, config_.estimator == AdvantageEstimator::kGrpo), mask);
      break;
    case AdvantageEstimator::kRloo:
      batch.advantages = TokenAdvantages(RlooAdvantages(batch.scores, batch.groups), mask);
      break;
  }
  batch.returns = at::zeros_like(batch.advantages);
}

UpdateMetrics Learner::Update(RolloutBatch& batch) {
  UpdateMetrics m;
  const int64_t n = batch.size();
  const int64_t mini = std::max<int64_t>(1, std::min(config_.mini_batches, n));
  bool first = true;
  for (int64_t epoch = 0; epoch < config_.epochs; ++epoch) {
    for (int64_t k = 0; k < mini; ++k) {
      int64_t begin = n * k / mini, end = n * (k + 1) / mini;
      RolloutBatch mb = batch.Slice(begin, end - begin);
      at::Tensor mb_mask = mb.action_mask.to(at::kBool);
      LossScale scale = GlobalScale(mb_mask);
      for (int64_t b = 0; b < mb.size(); b += config_.micro_batch_size) {
        RolloutBatch micro = mb.Slice(b, std::min(config_.micro_batch_size, mb.size() - b));
        if (b + config_.micro_batch_size >= mb.size()) {  // the last one: reduce while it runs backward
          actor_grads_->Arm();
          if (critic_grads_) critic_grads_->Arm();
        }
        at::Tensor mask = micro.action_mask.to(at::kBool);
        // One pass over the vocabulary serves the logprobs and the entropy.
        auto shifted = ShiftedLogprobs(policy_.Forward(micro.tokens, Positions(micro.tokens)), micro.tokens);
        at::Tensor logp = shifted.logprobs;
        at::Tensor loss = PolicyLoss(logp, micro.old_logprobs, micro.advantages, mask, config_.policy, scale);
        if (config_.entropy_coef > 0)
          loss = loss - config_.entropy_coef * Aggregate(shifted.entropy, mask, config_.policy.aggregation, scale);
        at::Tensor entropy = shifted.entropy.detach(), kl;
        if (config_.kl_coef > 0 && reference_ != nullptr) {
          at::Tensor ref;
          {
            c10::NoGradGuard no_grad;
            ref = SequenceLogprobs(*reference_, micro.tokens);
          }
          kl = KlPenalty(logp, ref, config_.kl_estimator);
          loss = loss + config_.kl_coef * Aggregate(kl, mask, config_.policy.aggregation, scale);
        }
        loss.backward();
        at::Tensor values, vloss;
        if (critic_ != nullptr) {
          values = SequenceValues(*critic_, micro.tokens);
          vloss = ValueLoss(values, micro.old_values, micro.returns, mask, config_.value_clip,
                            config_.policy.aggregation, scale);
          vloss.backward();
        }
        // Diagnostics once the backward passes are queued, so that their host
        // reads do not hold the GPU idle between forward and backward.
        c10::NoGradGuard no_grad;
        double tokens = mask.sum().item<double>();
        logp = logp.detach();
        PolicyLossStats s;
        PolicyLoss(logp, micro.old_logprobs, micro.advantages, mask, config_.policy, scale, &s);
        if (kl.defined())
          Accumulate(&m, "kl_to_reference", (kl.detach() * mask).sum().item<double>() / std::max(tokens, 1.0), tokens);
        Accumulate(&m, "policy_loss", loss.item<double>() * scale.tokens / std::max(tokens, 1.0), tokens);
        Accumulate(&m, "entropy", (entropy * mask).sum().item<double>() / std::max(tokens, 1.0), tokens);
        Accumulate(&m, "approx_kl", s.approx_kl, tokens);
        Accumulate(&m, "clip_fraction_low", s.clip_fraction_low, tokens);
        Accumulate(&m, "clip_fraction_high", s.clip_fraction_high, tokens);
        Accumulate(&m, "dual_clip_fraction", s.dual_clip_fraction, tokens);
        Accumulate(&m, "ratio_mean", s.ratio_mean, tokens);
        m["ratio_max"] = std::max(m.values.count("ratio_max") ? m["ratio_max"] : 0.0, s.ratio_max);
        m["ratio_min"] = std::min(m.values.count("ratio_min") ? m["ratio_min"] : 1e30, s.ratio_min);
        if (first && tokens > 0) {  // the trainer's logprobs against the sampler's, before any update
          at::Tensor gap = (logp - micro.old_logprobs.to(at::kFloat)).abs().masked_select(mask);
          Accumulate(&m, "logprob_gap_mean", gap.mean().item<double>(), tokens);
          m["logprob_gap_max"] =
              std::max(m.values.count("logprob_gap_max") ? m["logprob_gap_max"] : 0.0, gap.max().item<double>());
        }
        if (critic_ != nullptr) {
          double clip_fraction = 0;
          ValueLoss(values.detach(), micro.old_values, micro.returns, mask, config_.value_clip,
                    config_.policy.aggregation, scale, &clip_fraction);
          Accumulate(&m, "value_loss", vloss.item<double>() * scale.tokens / std::max(tokens, 1.0), tokens);
          Accumulate(&m, "value_clip_fraction", clip_fraction, tokens);
        }
      }
      first = false;
      actor_grads_->Finish();
      Accumulate(&m, "grad_norm", actor_opt_->Step(), 1);
      if (critic_ != nullptr) {
        critic_grads_->Finish();
        Accumulate(&m, "critic_grad_norm", critic_opt_->Step(), 1);
      }
    }
  }
  if (critic_ != nullptr)
    m["explained_variance"] = ExplainedVariance(batch.old_values, batch.returns, batch.action_mask);
  m["lr"] = actor_opt_->LearningRate(actor_opt_->step() - 1);
  return Finish(m);
}

UpdateMetrics Learner::Supervised(const RolloutBatch& batch, GradientBuckets& grads, AdamW& optimizer,
                                  const std::string& name,
                                  const std::function<at::Tensor(const RolloutBatch&)>& per_token_loss) {
  UpdateMetrics m;
  LossScale scale = GlobalScale(batch.action_mask.to(at::kBool));
  for (int64_t b = 0; b < batch.size(); b += config_.micro_batch_size) {
    RolloutBatch micro = batch.Slice(b, std::min(config_.micro_batch_size, batch.size() - b));
    if (b + config_.micro_batch_size >= batch.size()) grads.Arm();
    at::Tensor mask = micro.action_mask.to(at::kBool);
    at::Tensor loss = Aggregate(per_token_loss(micro), mask, LossAggregation::kTokenMean, scale);
    loss.backward();
    double tokens = mask.sum().item<double>();
    Accumulate(&m, name, loss.item<double>() * scale.tokens / std::max(tokens, 1.0), tokens);
  }
  grads.Finish();
  Accumulate(&m, &optimizer == actor_opt_.get() ? "grad_norm" : "critic_grad_norm", optimizer.Step(), 1);
  return m;
}

UpdateMetrics Learner::FineTune(const RolloutBatch& batch) {
  return Finish(Supervised(batch, *actor_grads_, *actor_opt_, "sft_loss",
                           [&](const RolloutBatch& micro) { return -SequenceLogprobs(policy_, micro.tokens); }));
}

UpdateMetrics Learner::PretrainCritic(RolloutBatch& batch) {
  TORCH_CHECK(critic_ != nullptr, "critic pretraining needs a critic");
  // Unclipped: pretraining moves the critic as far as the targets need.
  UpdateMetrics m = Supervised(batch, *critic_grads_, *critic_opt_, "value_loss", [&](const RolloutBatch& micro) {
    return 0.5 * (SequenceValues(*critic_, micro.tokens) - micro.returns.to(at::kFloat)).pow(2);
  });
  m["explained_variance"] = ExplainedVariance(batch.old_values, batch.returns, batch.action_mask);
  return Finish(m);
}

}  // namespace cuda_agent::rl

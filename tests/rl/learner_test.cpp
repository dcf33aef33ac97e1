// The learner's pieces beyond the losses: supervised stages, bf16 weights with
// fp32 master copies, DAPO's dynamic sampling and overlong filtering, and the
// rendezvous variables.
#include "cuda_agent/rl/learner.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace cuda_agent::rl {
namespace {

model::ModelConfig Config() {
  nlohmann::json j = {{"model_type", "qwen3"}, {"vocab_size", 24}, {"hidden_size", 32},
                      {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"head_dim", 8}, {"max_position_embeddings", 32}};
  return model::ParseModelConfig(j, "tiny").value();
}

RolloutBatch Batch(int64_t rows, int64_t T, std::vector<double> scores, std::vector<int64_t> groups) {
  at::manual_seed(3);
  RolloutBatch b;
  b.tokens = at::randint(0, 24, {rows, T}, at::kLong);
  b.action_mask = at::zeros({rows, T}, at::kBool);
  b.action_mask.narrow(1, T / 2, T - T / 2).fill_(true);
  b.old_logprobs = at::zeros({rows, T});
  b.scores = at::tensor(scores, at::kDouble).to(at::kFloat);
  b.groups = at::tensor(groups, at::kLong);
  b.rewards = at::zeros({rows, T});
  b.rewards.select(1, T - 1).copy_(b.scores);
  return b;
}

TEST(LearnerTest, RejectionFineTuningLowersTheNllOfKeptTrajectories) {
  auto policy = model::Transformer::Random(Config(), {}, 1);
  LearnerConfig config;
  config.actor.lr = 1e-2;
  config.actor.weight_decay = 0;
  Learner learner(*policy, nullptr, nullptr, config);
  RolloutBatch b = Batch(4, 10, {1, 1, 1, 1}, {0, 0, 1, 1});
  double first = learner.FineTune(b)["sft_loss"], last = first;
  for (int i = 0; i < 20; ++i) last = learner.FineTune(b)["sft_loss"];
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
}

TEST(LearnerTest, CriticPretrainingFitsTheReturns) {
  auto policy = model::Transformer::Random(Config(), {}, 1);
  auto critic = model::Transformer::Random(Config(), {at::kFloat, at::kCPU, true}, 2);
  LearnerConfig config;
  config.critic.lr = 1e-2;
  config.critic.weight_decay = 0;
  Learner learner(*policy, critic.get(), nullptr, config);
  RolloutBatch b = Batch(6, 10, {1, -1, 2, 0, 3, -1}, {0, 0, 1, 1, 2, 2});
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    learner.ComputeAdvantages(b);  // values before this step, GAE returns
    auto m = learner.PretrainCritic(b);
    if (i == 0) first = m["value_loss"];
    last = m["value_loss"];
  }
  EXPECT_LT(last, 0.2 * first) << first << " -> " << last;
  learner.ComputeAdvantages(b);
  EXPECT_GT(ExplainedVariance(b.old_values, b.returns, b.action_mask), 0.8);
}

TEST(LearnerTest, Bf16WeightsAreUpdatedThroughFp32MasterCopies) {
  auto policy = model::Transformer::Random(Config(), {at::kBFloat16, at::kCPU, false}, 1);
  at::Tensor before = policy->parameters()[1].second.detach().clone();
  LearnerConfig config;
  config.estimator = AdvantageEstimator::kGrpo;
  config.actor.lr = 1e-3;  // one step is below half of bf16's spacing near 1.0: alone it rounds away
  config.actor.weight_decay = 0;
  Learner learner(*policy, nullptr, nullptr, config);
  RolloutBatch b = Batch(4, 10, {1, 0, 1, 0}, {0, 0, 1, 1});
  {
    c10::NoGradGuard no_grad;
    b.old_logprobs = Learner::SequenceLogprobs(*policy, b.tokens).detach() * b.action_mask;
  }
  learner.ComputeAdvantages(b);
  learner.Update(b);
  EXPECT_TRUE(policy->parameters()[1].second.equal(before)) << "one 1e-3 step rounds back to 1.0 in bf16";
  for (int i = 0; i < 9; ++i) learner.Update(b);
  EXPECT_EQ(policy->parameters()[1].second.scalar_type(), at::kBFloat16);
  EXPECT_EQ(learner.actor_optimizer().step(), 10);
  // Ten steps add up in the fp32 master copy and cross bf16's rounding boundary.
  EXPECT_FALSE(policy->parameters()[1].second.equal(before)) << "the steps were lost to bf16 rounding";
}

TEST(DynamicSamplingTest, KeepsGroupsWithSpreadUntilTheTarget) {
  DynamicSampler sampler(/*target_groups=*/3, /*max_rounds=*/5);
  sampler.Add(Batch(6, 8, {1, 1, 0, 1, 2, 2}, {0, 0, 1, 1, 2, 2}));  // group 1 only
  EXPECT_EQ(sampler.kept_groups(), 1);
  EXPECT_EQ(sampler.dropped_groups(), 2);
  EXPECT_FALSE(sampler.Done());
  sampler.Add(Batch(6, 12, {0, 3, -1, 1, 5, 4}, {0, 0, 1, 1, 2, 2}));  // three more; one over the target
  EXPECT_TRUE(sampler.Done());
  RolloutBatch b = sampler.Take();
  ASSERT_EQ(b.size(), 6);
  EXPECT_EQ(b.tokens.size(1), 12);  // padded to the longest round
  EXPECT_EQ(std::get<0>(at::_unique(b.groups)).numel(), 3);
  EXPECT_FALSE(b.action_mask[0].narrow(0, 8, 4).any().item<bool>()) << "padding carries no loss";
  DynamicSampler capped(10, 2);
  capped.Add(Batch(2, 8, {1, 1}, {0, 0}));
  capped.Add(Batch(2, 8, {0, 0}, {0, 0}));
  EXPECT_TRUE(capped.Done());
  EXPECT_EQ(capped.Take().size(), 0);
}

TEST(DynamicSamplingTest, TruncatedResponsesCarryNoLoss) {
  RolloutBatch b = Batch(3, 8, {1, 0, 1}, {0, 0, 1});
  b.DropLoss(at::tensor({0, 1, 0}).to(at::kBool));
  EXPECT_TRUE(b.action_mask[0].any().item<bool>());
  EXPECT_FALSE(b.action_mask[1].any().item<bool>());
  EXPECT_TRUE(b.action_mask[2].any().item<bool>());
}

TEST(CommunicatorTest, RendezvousComesFromTheEnvironment) {
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("SLURM_NTASKS");
  auto single = Communicator::FromEnvironment("gloo");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ((*single)->world_size(), 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "0", 1);
  ::unsetenv("MASTER_ADDR");
  auto missing = Communicator::FromEnvironment("gloo");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("MASTER_ADDR"), std::string::npos);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "not-a-port", 1);
  EXPECT_FALSE(Communicator::FromEnvironment("gloo").ok());
  EXPECT_FALSE(Communicator::Connect("127.0.0.1", 1, 3, 2, "gloo").ok()) << "rank outside the world";
  EXPECT_FALSE(Communicator::Connect("127.0.0.1", 1, 0, 2, "mpi").ok()) << "unknown backend";
  if (!at::hasCUDA()) {  // NCCL needs GPUs: a clear refusal, not a crash
    ::setenv("MASTER_PORT", "29555", 1);
    auto nccl = Communicator::FromEnvironment("nccl");
    ASSERT_FALSE(nccl.ok());
    EXPECT_EQ(nccl.status().code(), StatusCode::kFailedPrecondition) << nccl.status().ToString();
  }
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("RANK");
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
}

}  // namespace
}  // namespace cuda_agent::rl

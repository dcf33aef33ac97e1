// Data parallelism over Gloo on CPU: two ranks, each with half of the global
// batch, end with the same parameters as one rank with the whole batch; and
// the ZeRO-1 sharded optimizer state saves and restores exactly.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "common/loopback_listener.h"
#include "cuda_agent/rl/learner.h"

namespace cuda_agent::rl {
namespace {
namespace fs = std::filesystem;

model::ModelConfig Config() {
  nlohmann::json j = {{"model_type", "qwen2"}, {"vocab_size", 32}, {"hidden_size", 32},
                      {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"max_position_embeddings", 32}};
  return model::ParseModelConfig(j, "tiny").value();
}

struct Replica {
  std::unique_ptr<model::Transformer> policy, critic;
  std::unique_ptr<Learner> learner;
  Replica(Communicator* comm, OptimizerConfig opt) {
    policy = model::Transformer::Random(Config(), {}, 11);
    critic = model::Transformer::Random(Config(), {at::kFloat, at::kCPU, true}, 12);
    LearnerConfig config;
    config.micro_batch_size = 3;  // uneven micro-batches on purpose
    config.bucket_mb = 0.01;      // many buckets, most reduced while backward still runs
    config.actor = config.critic = opt;
    learner = std::make_unique<Learner>(*policy, critic.get(), nullptr, config, comm);
  }
};

// A fixed batch of 8 trajectories in 4 groups of 2; the sampler's logprobs are
// the initial policy's plus noise, so the ratios are not all one.
RolloutBatch Batch() {
  auto policy = model::Transformer::Random(Config(), {}, 11);
  at::manual_seed(5);
  RolloutBatch b;
  b.tokens = at::randint(0, 32, {8, 10}, at::kLong);
  b.action_mask = at::zeros({8, 10}, at::kBool);
  b.action_mask.narrow(1, 6, 4).fill_(true);
  b.action_mask[3][9] = false;  // ragged ends
  b.action_mask[6].narrow(0, 8, 2).fill_(false);
  b.old_logprobs = (Learner::SequenceLogprobs(*policy, b.tokens).detach() + 0.1 * at::randn({8, 10})) * b.action_mask;
  b.scores = at::randn({8});
  b.groups = at::arange(8, at::kLong).div(2, "floor");
  b.rewards = at::zeros({8, 10});
  for (int64_t i = 0; i < 8; ++i) b.rewards[i][i == 3 ? 8 : (i == 6 ? 7 : 9)] = b.scores[i];
  return b;
}

OptimizerConfig Opt() {
  OptimizerConfig o;
  o.lr = 1e-2;
  o.max_grad_norm = 0.5;  // clipping must agree across ranks too
  return o;
}

double MaxDiff(const model::Transformer& a, const model::Transformer& b) {
  double d = 0;
  for (size_t i = 0; i < a.parameters().size(); ++i)
    d = std::max(d, (a.parameters()[i].second - b.parameters()[i].second).abs().max().item<double>());
  return d;
}

int FreePort() {
  testing::LoopbackListener l;  // the port is free again once it closes
  return l.port();
}

// Runs `fn(rank, comm)` on two ranks in two threads.
void OnTwoRanks(const std::function<void(int, Communicator*)>& fn) {
  int port = FreePort();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto comm = Communicator::Connect("127.0.0.1", port, r, 2, "gloo");
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      fn(r, comm->get());
    });
  for (auto& t : threads) t.join();
}

TEST(DistributedTest, TwoGlooRanksMatchOneRankOnTheWholeBatch) {
  const int kSteps = 3;
  Replica single(nullptr, Opt());
  RolloutBatch full = Batch();
  for (int s = 0; s < kSteps; ++s) {
    single.learner->ComputeAdvantages(full);
    single.learner->Update(full);
  }
  std::vector<std::unique_ptr<Replica>> ranks(2);
  RolloutBatch shared = Batch();  // made once: the global generator is not for two threads
  OnTwoRanks([&](int r, Communicator* comm) {
    ranks[r] = std::make_unique<Replica>(comm, Opt());
    RolloutBatch half = shared.Slice(4 * r, 4);  // whole groups
    for (int s = 0; s < kSteps; ++s) {
      ranks[r]->learner->ComputeAdvantages(half);
      ranks[r]->learner->Update(half);
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(MaxDiff(*ranks[r]->policy, *single.policy), 1e-5) << "rank " << r << " policy";
    EXPECT_LT(MaxDiff(*ranks[r]->critic, *single.critic), 1e-5) << "rank " << r << " critic";
  }
  // Sharded: each rank owns (and keeps state for) a part of the parameters.
  int owned0 = 0;
  for (size_t i = 0; i < single.policy->parameters().size(); ++i) owned0 += ranks[0]->learner->actor_optimizer().Owner(i) == 0;
  EXPECT_GT(owned0, 0);
  EXPECT_LT(owned0, static_cast<int>(single.policy->parameters().size()));
}

TEST(DistributedTest, ShardedOptimizerStateSavesAndRestores) {
  fs::path dir = fs::temp_directory_path() / ("zero1-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::unique_ptr<Replica>> straight(2), resumed(2);
  RolloutBatch shared = Batch();
  OnTwoRanks([&](int r, Communicator* comm) {
    RolloutBatch half = shared.Slice(4 * r, 4);
    straight[r] = std::make_unique<Replica>(comm, Opt());
    for (int s = 0; s < 2; ++s) {
      straight[r]->learner->ComputeAdvantages(half);
      straight[r]->learner->Update(half);
    }
    fs::path file = dir / ("actor.rank" + std::to_string(r) + ".safetensors");
    ASSERT_TRUE(straight[r]->learner->actor_optimizer().Save(file).ok());
    ASSERT_TRUE(straight[r]->learner->critic_optimizer()->Save(dir / ("critic.rank" + std::to_string(r))).ok());
    // A new process would load the weights from the checkpoint; copy them here.
    resumed[r] = std::make_unique<Replica>(comm, Opt());
    {
      c10::NoGradGuard no_grad;
      for (size_t i = 0; i < straight[r]->policy->parameters().size(); ++i)
        resumed[r]->policy->parameters()[i].second.copy_(straight[r]->policy->parameters()[i].second);
      for (size_t i = 0; i < straight[r]->critic->parameters().size(); ++i)
        resumed[r]->critic->parameters()[i].second.copy_(straight[r]->critic->parameters()[i].second);
    }
    ASSERT_TRUE(resumed[r]->learner->actor_optimizer().Load(file).ok());
    ASSERT_TRUE(resumed[r]->learner->critic_optimizer()->Load(dir / ("critic.rank" + std::to_string(r))).ok());
    EXPECT_EQ(resumed[r]->learner->actor_optimizer().step(), 2);
    for (auto* replica : {straight[r].get(), resumed[r].get()}) {
      replica->learner->ComputeAdvantages(half);
      replica->learner->Update(half);
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(MaxDiff(*resumed[r]->policy, *straight[r]->policy), 1e-6) << "rank " << r;
    EXPECT_LT(MaxDiff(*resumed[r]->critic, *straight[r]->critic), 1e-6) << "rank " << r;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cuda_agent::rl

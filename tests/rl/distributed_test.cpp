// Data parallelism over Gloo on CPU: two ranks, each with half of the global
// batch, end with the same parameters as one rank with the whole batch; and
// the ZeRO-1 sharded optimizer state saves and restores exactly.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "distributed_fixture.h"

namespace cuda_agent::rl {
namespace {
namespace fs = std::filesystem;
using namespace testing_fixture;

// Two ranks, each with half of the batch, against one rank with all of it;
// `shard` the optimizer state (ZeRO-1) or keep all of it on both.
void ExpectTwoRanksMatchOne(bool shard) {
  const int kSteps = 3;
  OptimizerConfig opt = Opt();
  opt.shard_state = shard;
  Replica single(nullptr, opt);
  RolloutBatch full = Batch();
  for (int s = 0; s < kSteps; ++s) {
    single.learner->ComputeAdvantages(full);
    single.learner->Update(full);
  }
  std::vector<std::unique_ptr<Replica>> ranks(2);
  RolloutBatch shared = Batch();  // made once: the global generator is not for two threads
  OnTwoRanks([&](int r, Communicator* comm) {
    ranks[r] = std::make_unique<Replica>(comm, opt);
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
  // Sharded: each rank owns (and keeps state for) a part of the parameters;
  // unsharded: all of them.
  int owned0 = 0;
  const int params = static_cast<int>(single.policy->parameters().size());
  for (int i = 0; i < params; ++i) owned0 += ranks[0]->learner->actor_optimizer().Owner(i) == 0;
  if (shard) {
    EXPECT_GT(owned0, 0);
    EXPECT_LT(owned0, params);
  } else {
    EXPECT_EQ(owned0, params);
  }
}

TEST(DistributedTest, TwoGlooRanksMatchOneRankOnTheWholeBatch) { ExpectTwoRanksMatchOne(true); }

TEST(DistributedTest, TwoGlooRanksWithReplicatedOptimizerStateMatchOneRank) { ExpectTwoRanksMatchOne(false); }

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

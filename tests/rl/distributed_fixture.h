// Shared by the data-parallel tests (Gloo on CPU, NCCL on GPUs): a tiny model,
// a fixed batch, and two ranks in two threads.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/loopback_listener.h"
#include "cuda_agent/rl/learner.h"

namespace cuda_agent::rl::testing_fixture {

inline model::ModelConfig Config() {
  nlohmann::json j = {{"model_type", "qwen2"},    {"vocab_size", 32},
                      {"hidden_size", 32},        {"intermediate_size", 64},
                      {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"max_position_embeddings", 32}};
  return model::ParseModelConfig(j, "tiny").value();
}

struct Replica {
  std::unique_ptr<model::Transformer> policy, critic;
  std::unique_ptr<Learner> learner;
  Replica(Communicator* comm, OptimizerConfig opt, c10::Device device = at::kCPU) {
    policy = model::Transformer::Random(Config(), {at::kFloat, device}, 11);
    critic = model::Transformer::Random(Config(), {at::kFloat, device, true}, 12);
    LearnerConfig config;
    config.micro_batch_size = 3;  // uneven micro-batches on purpose
    config.bucket_mb = 0.01;      // many buckets, most reduced while backward still runs
    config.actor = config.critic = opt;
    learner = std::make_unique<Learner>(*policy, critic.get(), nullptr, config, comm);
  }
};

// A fixed batch of 8 trajectories in 4 groups of 2; the sampler's logprobs are
// the initial policy's plus noise, so the ratios are not all one.
inline RolloutBatch Batch() {
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

inline OptimizerConfig Opt() {
  OptimizerConfig o;
  o.lr = 1e-2;
  o.max_grad_norm = 0.5;  // clipping must agree across ranks too
  return o;
}

inline double MaxDiff(const model::Transformer& a, const model::Transformer& b) {
  double d = 0;
  for (size_t i = 0; i < a.parameters().size(); ++i)
    d = std::max(d, (a.parameters()[i].second.cpu() - b.parameters()[i].second.cpu()).abs().max().item<double>());
  return d;
}

inline int FreePort() {
  testing::LoopbackListener l;  // the port is free again once it closes
  return l.port();
}

// Runs `fn(rank, comm)` on two ranks in two threads; `before(rank)` runs in
// the rank's thread first (to pick its GPU). A rendezvous that fails on
// either rank is made again on a fresh port, up to three times: Gloo's
// loopback connections are refused now and then on a busy host ("Connection
// closed by peer" in connectFullMesh, seen once in CI), which is not what
// these tests are about.
inline void OnTwoRanks(const std::function<void(int, Communicator*)>& fn, const std::string& backend = "gloo",
                       const std::function<void(int)>& before = {}) {
  std::unique_ptr<Communicator> comms[2];
  std::string errors;
  for (int attempt = 0; attempt < 3 && !(comms[0] && comms[1]); ++attempt) {
    comms[0].reset(), comms[1].reset();
    const int port = FreePort();
    std::string failed[2];
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        if (before) before(r);
        auto comm = Communicator::Connect("127.0.0.1", port, r, 2, backend);
        if (comm.ok())
          comms[r] = std::move(comm).value();
        else
          failed[r] = comm.status().ToString();
      });
    for (auto& t : threads) t.join();
    for (const auto& f : failed)
      if (!f.empty()) errors += f + "\n";
  }
  ASSERT_TRUE(comms[0] && comms[1]) << errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      if (before) before(r);
      fn(r, comms[r].get());
    });
  for (auto& t : threads) t.join();
}

}  // namespace cuda_agent::rl::testing_fixture

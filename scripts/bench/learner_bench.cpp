// Tokens/s and model FLOPs utilisation of PPO updates (policy + critic off) on
// a random model of a given shape.
//
//   learner_bench --shape qwen2.5-0.5b --device cuda --dtype bfloat16 --batch 4 --seq 4096 --steps 5
//
// Each step is one Learner::Update on `batch` rows of `seq` tokens (the second
// half of each row is the response), micro-batches of --micro-batch rows, one optimizer step. MFU
// counts 6 * parameters + 12 * layers * hidden * seq FLOPs per token (forward and
// backward, attention included) against --peak-tflops.
//
// Data parallel over GPUs (the scaling figure): each rank runs `batch` rows,
// ranks meet through torchrun's variables and NCCL (Gloo on CPU).
//
//   python3 -m torch.distributed.run --nproc-per-node 2 --no-python learner_bench --shape qwen2.5-0.5b
//       --device cuda --dtype bfloat16 --batch 4 --seq 4096
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cuda_agent/rl/communicator.h"
#include "cuda_agent/rl/learner.h"
#include "kernel_profile.h"

using namespace cuda_agent;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"PPO update throughput"};
  std::string shape = "tiny", device = "cpu", dtype = "float32", json_path;
  int64_t batch = 2, seq = 256, steps = 3, micro_batch = 1;
  double peak_tflops = 990;
  app.add_option("--shape", shape, "qwen2.5-0.5b or tiny")->check(CLI::IsMember({"qwen2.5-0.5b", "tiny"}));
  app.add_option("--device", device, "cpu or cuda");
  app.add_option("--dtype", dtype, "float32 or bfloat16");
  app.add_option("--batch", batch, "rows per update on each rank");
  app.add_option("--seq", seq, "tokens per row");
  app.add_option("--steps", steps, "timed updates (after one warm-up)");
  app.add_option("--micro-batch", micro_batch, "rows per forward/backward pass");
  app.add_option("--peak-tflops", peak_tflops, "the device's dense peak (H200 bf16: 990)");
  app.add_option("--json", json_path, "write the result here");
  bool profile = false, shard = true;
  app.add_flag("--profile", profile, "add GPU time per kernel over one more update to the result");
  app.add_option("--shard-optimizer", shard, "ZeRO-1 over the ranks (1) or the whole state on each (0)");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json cfg = shape == "tiny" ? nlohmann::json{{"model_type", "qwen2"},      {"vocab_size", 4096},
                                                        {"hidden_size", 128},         {"intermediate_size", 256},
                                                        {"num_hidden_layers", 4},     {"num_attention_heads", 4},
                                                        {"num_key_value_heads", 2},   {"max_position_embeddings", 8192},
                                                        {"tie_word_embeddings", true}}
                                       : nlohmann::json{{"model_type", "qwen2"},    {"vocab_size", 151936},
                                                        {"hidden_size", 896},       {"intermediate_size", 4864},
                                                        {"num_hidden_layers", 24},  {"num_attention_heads", 14},
                                                        {"num_key_value_heads", 2}, {"max_position_embeddings", 32768},
                                                        {"rope_theta", 1000000.0},  {"tie_word_embeddings", true}};
  auto comm = rl::Communicator::FromEnvironment(device == "cuda" ? "nccl" : "gloo");
  if (!comm.ok()) return std::cerr << comm.status().ToString() << "\n", 1;
  const int world = (*comm)->world_size(), rank = (*comm)->rank();
  if (device == "cuda") device = "cuda:" + std::to_string(rl::LocalDeviceIndex());  // one GPU per rank of this node
  model::ModelConfig config = model::ParseModelConfig(cfg, shape).value();
  model::LoadOptions lo{dtype == "bfloat16" ? at::kBFloat16 : at::kFloat, c10::Device(device), false};
  auto policy = model::Transformer::Random(config, lo, 0);
  rl::LearnerConfig lc;
  lc.estimator = rl::AdvantageEstimator::kGrpo;
  lc.micro_batch_size = micro_batch;
  lc.actor.shard_state = shard;
  rl::Learner learner(*policy, nullptr, nullptr, lc, comm->get());

  auto on = at::TensorOptions().device(lo.device);
  rl::RolloutBatch b;
  b.tokens = at::randint(0, config.vocab_size, {batch, seq}, on.dtype(at::kLong));
  b.action_mask = at::zeros({batch, seq}, on.dtype(at::kBool));
  b.action_mask.narrow(1, seq / 2, seq / 2).fill_(true);
  {
    c10::InferenceMode guard;
    b.old_logprobs = rl::Learner::SequenceLogprobs(*policy, b.tokens).detach() * b.action_mask;
  }
  b.old_logprobs = b.old_logprobs.clone();
  b.scores = at::randn({batch}, on.dtype(at::kFloat));
  b.groups = at::zeros({batch}, on.dtype(at::kLong));
  b.rewards = at::zeros({batch, seq}, on.dtype(at::kFloat));
  learner.ComputeAdvantages(b);
  auto sync = [&] {
    if (lo.device.is_cuda()) at::zeros({1}, on).cpu();
  };
  learner.Update(b);  // warm-up
  sync();
  auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) learner.Update(b);
  sync();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(steps);
  double tokens_per_s = static_cast<double>(world * batch * seq) / seconds;  // all ranks
  double flops_per_token = 6.0 * static_cast<double>(config.ParameterCount()) +
                           12.0 * static_cast<double>(config.num_layers * config.hidden_size * seq);
  double mfu = tokens_per_s / world * flops_per_token / (peak_tflops * 1e12);  // per GPU
  nlohmann::json row = {{"shape", shape},
                        {"device", device},
                        {"dtype", dtype},
                        {"batch", batch},
                        {"micro_batch", micro_batch},
                        {"seq", seq},
                        {"seconds_per_update", seconds},
                        {"tokens_per_s", tokens_per_s},
                        {"parameters", config.ParameterCount()},
                        {"mfu", mfu},
                        {"peak_tflops", peak_tflops},
                        {"world_size", world},
                        {"shard_optimizer", shard},
                        {"tokens_per_s_per_rank", tokens_per_s / world}};
  if (profile) {
    KernelProfile kp;
    learner.Update(b);
    sync();
    row["profile_one_update"] = kp.Stop(60);
  }
  if (rank != 0) return 0;
  std::cout << row.dump() << std::endl;
  if (!json_path.empty()) std::ofstream(json_path) << row.dump(1) << "\n";
  return 0;
}

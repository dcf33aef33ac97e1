// The resolved configuration of one cuda-agent process: one section per component.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cuda_agent/config/fields.h"
#include "cuda_agent/config/judge_config.h"
#include "cuda_agent/config/sandbox_config.h"
#include "cuda_agent/config/train_config.h"
#include "cuda_agent/config/worker_config.h"

namespace cuda_agent::config {

struct Config {
  std::string log_level = "info";
  SandboxConfig sandbox;
  JudgeConfig judge;
  WorkerConfig worker;
  ClientConfig client;
  PolicyConfig model;
  TaskConfig task;
  AlgorithmConfig algorithm;
  TrainConfig train;

  template <class V>
  void Visit(V& v) {
    v("log_level", log_level, "debug, info, warn, error or off", OneOf{{"debug", "info", "warn", "error", "off"}});
    v("sandbox", sandbox, "isolation of every compile and run of candidate code");
    v("judge", judge, "how candidate kernels are compiled, verified, timed and rewarded");
    v("worker", worker, "the rollout worker service (cuda-agent worker)");
    v("client", client, "how trainers and evaluators reach workers");
    v("model", model, "the policy trained by cuda-agent train");
    v("task", task, "what the policy learns (a task with a verifiable reward)");
    v("algorithm", algorithm, "the RL algorithm: advantages, losses, optimizer");
    v("train", train, "the training run: steps, batch, evaluation, checkpoints");
  }
};

// Loads `path` (empty: defaults only), then applies each "a.b=c" override in
// order. Every error names the file, line and key.
StatusOr<Config> LoadConfig(const std::filesystem::path& path, const std::vector<std::string>& overrides);
// The resolved config as commented YAML; LoadConfig of this text gives it back.
std::string DumpConfig(Config config);

}  // namespace cuda_agent::config

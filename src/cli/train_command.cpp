// `cuda-agent train [--config FILE] [--set k=v] [--resume auto|DIR]`: the
// training loop (trainer/trainer.h) on the embedded defaults or a config.
// Under torchrun (or srun) every process is one data-parallel rank: NCCL with
// model.device cuda, Gloo with cpu.
#include <iostream>
#include <memory>

#include "commands.h"
#include "cuda_agent/config/config.h"
#include "cuda_agent/rl/communicator.h"
#include "cuda_agent/trainer/trainer.h"
#include "cuda_agent/util/log.h"

namespace cuda_agent::cli {

std::function<int()> AddTrainCommand(CLI::App* app) {
  auto opts = std::make_shared<ConfigOptions>();
  auto resume = std::make_shared<std::string>();
  CLI::App* cmd = app->add_subcommand("train", "train the policy with RL (PPO with a critic, GRPO/DAPO)");
  AddConfigOptions(cmd, opts.get());
  cmd->add_option("--resume", *resume,
                  "auto: continue from the newest checkpoint in train.output_dir (fresh if none); "
                  "or a checkpoint directory");
  return [opts, resume]() -> int {
    config::Config config;
    if (auto done = LoadCommandConfig(*opts, {}, &config)) return *done;
    auto comm = rl::Communicator::FromEnvironment(config.model.device == "cuda" ? "nccl" : "gloo");
    if (!comm.ok()) return Fail(comm.status());
    auto trainer = trainer::Trainer::Create(config, *resume, comm->get());
    if (!trainer.ok()) return Fail(trainer.status());
    auto result = (*trainer)->Run();
    if (!result.ok()) return Fail(result.status());
    if ((*comm)->rank() == 0) {
      std::cout << "trained " << result->step << " steps";
      if (result->last_eval >= 0) std::cout << ", greedy evaluation reward " << result->last_eval;
      if (result->target_reached >= 0) std::cout << " (target reached at step " << result->target_reached << ")";
      std::cout << "\ncheckpoints and metrics.jsonl in " << config.train.output_dir << std::endl;
    }
    return 0;
  };
}

}  // namespace cuda_agent::cli

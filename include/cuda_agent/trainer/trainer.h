// The training loop of `cuda-agent train` (DESIGN.md §2). Each step: draw
// prompts from the task, sample group_size responses to each with the
// policy's own generator, score them, drop groups without reward spread
// (DAPO's dynamic sampling, optional), compute advantages, update the policy
// (and critic), append one line to metrics.jsonl. Ranks split every step's
// prompts; the learner sums their gradients. Optional first stages (DESIGN.md
// §6): rejection fine-tuning on the responses that reach a reward, then
// critic value pretraining, then RL for the rest of the steps.
//
// Checkpoints (output_dir/step_NNNNNN/) hold the policy and critic as Hugging
// Face directories, every rank's optimizer shard and trainer_state.json,
// written last: a directory without it is an unfinished checkpoint and is
// ignored. Prompts and sampling are seeded per step, so a run resumed from a
// checkpoint continues exactly as the uninterrupted run would have.
//
//   auto trainer = Trainer::Create(config, "auto", comm.get());
//   auto result = (*trainer)->Run();
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cuda_agent/config/config.h"
#include "cuda_agent/model/transformer.h"
#include "cuda_agent/rl/communicator.h"
#include "cuda_agent/trainer/synthetic_task.h"
#include "cuda_agent/util/status.h"

namespace cuda_agent::trainer {

struct TrainResult {
  int64_t step = 0;             // steps completed (including those before a resume)
  double last_eval = -1;        // the last greedy evaluation's mean reward; -1: none ran
  int64_t target_reached = -1;  // the step whose evaluation reached target_reward; -1: not reached
};

class Trainer {
 public:
  // `resume`: empty (a fresh run; output_dir must hold no checkpoint), "auto"
  // (the newest checkpoint in output_dir, or fresh if none) or a checkpoint
  // directory. `comm` null: one rank. It must outlive the trainer.
  static StatusOr<std::unique_ptr<Trainer>> Create(const config::Config& config, const std::string& resume,
                                                   rl::Communicator* comm);
  ~Trainer();

  StatusOr<TrainResult> Run();

  // The newest complete checkpoint under `output_dir`; empty when none.
  static std::filesystem::path LatestCheckpoint(const std::filesystem::path& output_dir);

  const model::Transformer& policy() const;
  int64_t step() const;

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda_agent::trainer

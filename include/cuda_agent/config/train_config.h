// Options of `cuda-agent train`: the policy, the task it learns, the RL
// algorithm and the run (trainer component). Plain values only; the trainer
// turns them into model and learner settings.
#pragma once

#include <cstdint>
#include <string>

#include "cuda_agent/config/fields.h"

namespace cuda_agent::config {

struct PolicyConfig {
  std::string path;  // a Hugging Face checkpoint directory; empty: a random model of the shape below
  std::string dtype = "float32";
  std::string device = "cpu";
  std::string architecture = "llama";
  int64_t hidden_size = 64;
  int64_t intermediate_size = 128;
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t init_seed = 1;

  template <class V>
  void Visit(V& v) {
    v("path", path, "Hugging Face checkpoint directory (config.json + safetensors); empty: a random model");
    v("dtype", dtype, "weights and activations", OneOf{{"float32", "bfloat16"}});
    v("device", device, "cpu, or cuda (each rank on the GPU of its LOCAL_RANK)", OneOf{{"cpu", "cuda"}});
    v("architecture", architecture, "random model: Hugging Face model_type", OneOf{{"llama", "qwen2", "qwen3"}});
    v("hidden_size", hidden_size, "random model: width", Range{8, 1 << 16});
    v("intermediate_size", intermediate_size, "random model: MLP width", Range{8, 1 << 18});
    v("layers", layers, "random model: transformer layers", Range{1, 256});
    v("heads", heads, "random model: attention heads", Range{1, 256});
    v("kv_heads", kv_heads, "random model: key/value heads (divides heads)", Range{1, 256});
    v("init_seed", init_seed, "random model: seed of the initial weights", Range{0, 1e15});
  }
};

// A task with a verifiable reward, in token space: the prompt is BOS, `length`
// symbols, SEP (token ids 0, 2.., 1); the response must be the symbols copied,
// reversed or sorted. Reward: the fraction of positions right.
struct TaskConfig {
  std::string kind = "copy";
  int64_t length = 3;
  int64_t symbols = 6;

  template <class V>
  void Visit(V& v) {
    v("kind", kind, "copy, reverse or sort the prompt's symbols", OneOf{{"copy", "reverse", "sort"}});
    v("length", length, "symbols per prompt (and response tokens)", Range{1, 1024});
    v("symbols", symbols, "alphabet size (token ids 2 .. symbols + 1)", Range{2, 1 << 20});
  }
};

struct AlgorithmConfig {
  std::string estimator = "gae";
  double gamma = 1.0;
  double lambda = 0.95;
  double clip_low = 0.2;
  double clip_high = 0.28;
  double dual_clip = 0;
  std::string loss_aggregation = "token";
  double value_clip = 0.2;
  double entropy_coef = 0;
  double kl_coef = 0;
  std::string kl_estimator = "k3";
  bool dynamic_sampling = false;
  int64_t max_sampling_rounds = 4;
  int64_t micro_batch_size = 64;
  int64_t mini_batches = 2;
  int64_t epochs = 1;
  double actor_lr = 5e-4;
  double critic_lr = 1e-3;
  double weight_decay = 0;
  double max_grad_norm = 1.0;
  int64_t warmup_steps = 0;
  std::string schedule = "constant";
  double bucket_mb = 25;
  bool shard_optimizer = true;

  template <class V>
  void Visit(V& v) {
    v("estimator", estimator,
      "advantages: gae (PPO with a critic), grpo, grpo_no_std (DAPO's choice is either group form), rloo",
      OneOf{{"gae", "grpo", "grpo_no_std", "rloo"}});
    v("gamma", gamma, "GAE discount", Range{0, 1});
    v("lambda", lambda, "GAE lambda", Range{0, 1});
    v("clip_low", clip_low, "policy ratio floor 1 - clip_low", Range{0, 1});
    v("clip_high", clip_high, "policy ratio ceiling 1 + clip_high (clip-higher)", Range{0, 10});
    v("dual_clip", dual_clip, "dual-clip bound c > 1 on negative advantages; 0: off", Range{0, 100});
    v("loss_aggregation", loss_aggregation, "token: mean over all tokens of the batch (DAPO); sequence: per sequence",
      OneOf{{"token", "sequence"}});
    v("value_clip", value_clip, "critic value clipping range", Range{0, 1e9});
    v("entropy_coef", entropy_coef, "entropy bonus weight; 0: off", Range{0, 10});
    v("kl_coef", kl_coef, "KL penalty to the initial policy; 0: off (DAPO)", Range{0, 10});
    v("kl_estimator", kl_estimator, "k1 or k3", OneOf{{"k1", "k3"}});
    v("dynamic_sampling", dynamic_sampling,
      "DAPO: drop groups whose rewards are all equal and sample again until the batch is full");
    v("max_sampling_rounds", max_sampling_rounds, "dynamic sampling: rounds per step at most", Range{1, 1000});
    v("micro_batch_size", micro_batch_size, "rows per forward/backward", Range{1, 1 << 20});
    v("mini_batches", mini_batches, "optimizer steps per epoch over the batch", Range{1, 1 << 20});
    v("epochs", epochs, "passes over each batch", Range{1, 1000});
    v("actor_lr", actor_lr, "policy learning rate", Range{0, 1});
    v("critic_lr", critic_lr, "critic learning rate", Range{0, 1});
    v("weight_decay", weight_decay, "AdamW weight decay", Range{0, 1});
    v("max_grad_norm", max_grad_norm, "global gradient-norm clip; 0: off", Range{0, 1e9});
    v("warmup_steps", warmup_steps, "linear learning-rate warm-up, optimizer steps", Range{0, 1e9});
    v("schedule", schedule, "after warm-up: constant or cosine", OneOf{{"constant", "cosine"}});
    v("bucket_mb", bucket_mb, "gradient all-reduce bucket, MiB", Range{0.001, 1e6});
    v("shard_optimizer", shard_optimizer,
      "ZeRO-1: each rank keeps and updates the optimizer state of a share of the parameters, then broadcasts "
      "them; false: every rank keeps all of it and takes the same step (faster while it fits)");
  }
};

struct TrainConfig {
  std::string output_dir = "runs/quickstart";
  int64_t steps = 300;
  int64_t prompts_per_step = 16;
  int64_t group_size = 8;
  double temperature = 1.0;
  int64_t seed = 0;
  int64_t eval_every = 10;
  int64_t eval_prompts = 64;
  double target_reward = 0.9;
  int64_t checkpoint_every = 50;
  int64_t keep_checkpoints = 2;
  int64_t rft_steps = 0;
  double rft_min_reward = 1.0;
  int64_t critic_pretrain_steps = 0;

  template <class V>
  void Visit(V& v) {
    v("output_dir", output_dir, "checkpoints (step_NNNNNN/), metrics.jsonl and the resolved config.yaml");
    v("steps", steps, "training steps (one batch of rollouts and one update each)", Range{1, 1e9});
    v("prompts_per_step", prompts_per_step, "prompts per step over all ranks (a multiple of the ranks)",
      Range{1, 1 << 20});
    v("group_size", group_size, "responses sampled per prompt", Range{1, 1 << 16});
    v("temperature", temperature, "sampling temperature of the rollouts", Range{0.01, 100});
    v("seed", seed, "seed of prompts and sampling (a resumed run continues the same streams)", Range{0, 1e15});
    v("eval_every", eval_every, "greedy evaluation on held-out prompts every N steps; 0: never", Range{0, 1e9});
    v("eval_prompts", eval_prompts, "held-out prompts per evaluation", Range{1, 1 << 20});
    v("target_reward", target_reward, "stop once the greedy evaluation reaches this mean reward; 0: run all steps",
      Range{0, 1e9});
    v("checkpoint_every", checkpoint_every, "checkpoint every N steps (and at the end); 0: only at the end",
      Range{0, 1e9});
    v("keep_checkpoints", keep_checkpoints, "newest checkpoints kept; older ones are deleted", Range{1, 1e6});
    v("rft_steps", rft_steps,
      "stage 1, the first N of `steps`: rejection fine-tuning (cross-entropy on the sampled responses that "
      "reach rft_min_reward); 0: none",
      Range{0, 1e9});
    v("rft_min_reward", rft_min_reward, "rejection fine-tuning keeps responses with at least this reward",
      Range{-1e9, 1e9});
    v("critic_pretrain_steps", critic_pretrain_steps,
      "stage 2, the next N steps: critic value pretraining on GAE returns, the policy unchanged (estimator gae); "
      "the rest of `steps` is RL",
      Range{0, 1e9});
  }
};

}  // namespace cuda_agent::config

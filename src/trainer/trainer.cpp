#include "cuda_agent/trainer/trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cuda_agent/model/generate.h"
#include "cuda_agent/rl/learner.h"
#include "cuda_agent/util/file.h"
#include "cuda_agent/util/log.h"

namespace cuda_agent::trainer {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Independent streams from (seed, step, round, stream) (splitmix64 finaliser).
uint64_t StreamSeed(int64_t seed, int64_t step, int64_t round, int64_t stream) {
  uint64_t x = static_cast<uint64_t>(seed);
  for (int64_t v : {step, round, stream}) {
    x += 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(v);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
  }
  return x;
}

std::string CheckpointName(int64_t step) {
  std::ostringstream s;
  s << "step_" << std::setw(6) << std::setfill('0') << step;
  return s.str();
}

StatusOr<rl::LearnerConfig> MakeLearnerConfig(const config::AlgorithmConfig& a) {
  rl::LearnerConfig c;
  c.estimator = a.estimator == "gae"           ? rl::AdvantageEstimator::kGae
                : a.estimator == "grpo"        ? rl::AdvantageEstimator::kGrpo
                : a.estimator == "grpo_no_std" ? rl::AdvantageEstimator::kGrpoNoStd
                                               : rl::AdvantageEstimator::kRloo;
  c.gamma = a.gamma;
  c.lambda = a.lambda;
  c.policy.clip_low = a.clip_low;
  c.policy.clip_high = a.clip_high;
  c.policy.dual_clip = a.dual_clip;
  if (a.dual_clip != 0 && a.dual_clip <= 1)
    return InvalidArgument("algorithm.dual_clip: " + std::to_string(a.dual_clip) + " must be 0 (off) or above 1");
  c.policy.aggregation = a.loss_aggregation == "token" ? rl::LossAggregation::kTokenMean
                                                       : rl::LossAggregation::kSequenceMean;
  c.value_clip = a.value_clip;
  c.entropy_coef = a.entropy_coef;
  c.kl_coef = a.kl_coef;
  c.kl_estimator = a.kl_estimator == "k1" ? rl::KlEstimator::kK1 : rl::KlEstimator::kK3;
  c.micro_batch_size = a.micro_batch_size;
  c.mini_batches = a.mini_batches;
  c.epochs = a.epochs;
  c.bucket_mb = a.bucket_mb;
  for (auto [opt, lr] : {std::pair{&c.actor, a.actor_lr}, std::pair{&c.critic, a.critic_lr}}) {
    opt->lr = lr;
    opt->weight_decay = a.weight_decay;
    opt->max_grad_norm = a.max_grad_norm;
    opt->warmup_steps = a.warmup_steps;
    opt->schedule = a.schedule;
    opt->shard_state = a.shard_optimizer;
  }
  return c;
}

// The initial weights: the configured checkpoint, or a random model sized for the task.
StatusOr<std::unique_ptr<model::Transformer>> InitialModel(const config::Config& c, const model::LoadOptions& lo,
                                                           int64_t vocab) {
  if (!c.model.path.empty()) {
    CA_ASSIGN_OR_RETURN(auto m, model::Transformer::Load(c.model.path, lo));
    if (m->config().vocab_size < vocab)
      return InvalidArgument("model.path " + c.model.path + ": vocabulary of " +
                             std::to_string(m->config().vocab_size) + " tokens, the task needs " +
                             std::to_string(vocab));
    return m;
  }
  if (c.model.heads % c.model.kv_heads != 0 || c.model.hidden_size % c.model.heads != 0)
    return InvalidArgument("model: heads (" + std::to_string(c.model.heads) + ") must divide hidden_size (" +
                           std::to_string(c.model.hidden_size) + ") and be a multiple of kv_heads (" +
                           std::to_string(c.model.kv_heads) + ")");
  json j = {{"model_type", c.model.architecture},
            {"vocab_size", vocab},
            {"hidden_size", c.model.hidden_size},
            {"intermediate_size", c.model.intermediate_size},
            {"num_hidden_layers", c.model.layers},
            {"num_attention_heads", c.model.heads},
            {"num_key_value_heads", c.model.kv_heads},
            {"max_position_embeddings", 2 * c.task.length + 2},
            {"rope_theta", 10000.0}};
  CA_ASSIGN_OR_RETURN(auto config, model::ParseModelConfig(j, "model"));
  // The critic gets its own stream so that its trunk does not start as a copy of the policy's.
  return model::Transformer::Random(config, lo, static_cast<uint64_t>(c.model.init_seed) + (lo.value_head ? 1 : 0));
}

}  // namespace

struct Trainer::Impl {
  config::Config config;
  rl::Communicator* comm = nullptr;
  std::unique_ptr<rl::Communicator> single;
  SyntheticTask task;
  model::LoadOptions options;
  std::unique_ptr<model::Transformer> policy, critic, reference;
  std::unique_ptr<rl::Learner> learner;
  std::unique_ptr<model::Generator> generator;
  int64_t step = 0;
  double last_eval = -1;
  fs::path last_checkpoint;

  explicit Impl(const config::Config& c) : config(c), task(c.task) {}

  // The paper's stages in order: rejection fine-tuning, critic value
  // pretraining, then RL; a step's stage follows from the step alone.
  std::string StageOf(int64_t s) const {
    const config::TrainConfig& t = config.train;
    if (s < t.rft_steps) return "rft";
    if (s < t.rft_steps + t.critic_pretrain_steps) return "critic_pretrain";
    return "rl";
  }

  int rank() const { return comm->rank(); }
  int world() const { return comm->world_size(); }
  fs::path output() const { return config.train.output_dir; }

  // Sums `values` over ranks.
  std::vector<double> SumOverRanks(const std::vector<double>& values) {
    std::vector<at::Tensor> t{at::tensor(values, at::kDouble).to(options.device)};
    comm->AllReduceSum(t);
    at::Tensor host = t[0].to(at::kCPU);
    return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
  }

  std::vector<model::GenerationRequest> Requests(const std::vector<std::vector<int32_t>>& prompts, int64_t copies,
                                                 double temperature) const {
    std::vector<model::GenerationRequest> requests;
    for (const auto& p : prompts)
      for (int64_t g = 0; g < copies; ++g) {
        model::GenerationRequest r;
        r.prompt = p;
        r.sampling.temperature = temperature;
        r.sampling.max_new_tokens = task.response_tokens();
        requests.push_back(std::move(r));
      }
    return requests;
  }

  // Rows of prompt + response, right-padded; the outcome reward on the last response token.
  rl::RolloutBatch MakeBatch(const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<model::GenerationResult>& results, int64_t group) const {
    const int64_t B = static_cast<int64_t>(results.size());
    int64_t T = 0;
    for (int64_t i = 0; i < B; ++i)
      T = std::max<int64_t>(T, prompts[i / group].size() + results[i].tokens.size());
    rl::RolloutBatch b;
    b.tokens = at::zeros({B, T}, at::kLong);
    b.action_mask = at::zeros({B, T}, at::kBool);
    b.old_logprobs = at::zeros({B, T});
    b.rewards = at::zeros({B, T});
    b.scores = at::zeros({B});
    b.groups = at::zeros({B}, at::kLong);
    auto tokens = b.tokens.accessor<int64_t, 2>();
    auto mask = b.action_mask.accessor<bool, 2>();
    auto old = b.old_logprobs.accessor<float, 2>();
    auto rewards = b.rewards.accessor<float, 2>();
    auto scores = b.scores.accessor<float, 1>();
    auto groups = b.groups.accessor<int64_t, 1>();
    for (int64_t i = 0; i < B; ++i) {
      const auto& prompt = prompts[i / group];
      const auto& r = results[i];
      const int64_t P = static_cast<int64_t>(prompt.size()), R = static_cast<int64_t>(r.tokens.size());
      for (int64_t t = 0; t < P; ++t) tokens[i][t] = prompt[t];
      for (int64_t t = 0; t < R; ++t) {
        tokens[i][P + t] = r.tokens[t];
        mask[i][P + t] = true;
        old[i][P + t] = r.logprobs[t];
      }
      const float reward = static_cast<float>(task.Reward(prompt, r.tokens));
      if (R > 0) rewards[i][P + R - 1] = reward;
      scores[i] = reward;
      groups[i] = i / group;
    }
    return b;
  }

  // Greedy mean reward on the held-out prompts (the same every time), split over ranks.
  double Evaluate() {
    std::mt19937_64 rng(StreamSeed(config.train.seed, -1, 0, 0));
    std::vector<std::vector<int32_t>> mine;
    for (int64_t i = 0; i < config.train.eval_prompts; ++i) {
      auto p = task.Prompt(rng);
      if (i % world() == rank()) mine.push_back(std::move(p));
    }
    double sum = 0;
    if (!mine.empty()) {
      auto results = generator->Generate(Requests(mine, 1, 0.0));
      for (size_t i = 0; i < results.size(); ++i) sum += task.Reward(mine[i], results[i].tokens);
    }
    auto total = SumOverRanks({sum, static_cast<double>(mine.size())});
    return total[0] / total[1];
  }

  // One step's rollouts on this rank: its share of the step's prompts, with
  // further rounds under dynamic sampling until its groups are full.
  rl::RolloutBatch Rollouts(bool dynamic, json* metrics) {
    const config::TrainConfig& t = config.train;
    const int64_t per_rank = t.prompts_per_step / world();
    rl::DynamicSampler sampler(per_rank, dynamic ? config.algorithm.max_sampling_rounds : 1);
    rl::RolloutBatch all;
    double reward_sum = 0, responses = 0, response_tokens = 0;
    for (int64_t round = 0; !sampler.Done(); ++round) {
      std::mt19937_64 rng(StreamSeed(t.seed, step, round, 0));
      std::vector<std::vector<int32_t>> prompts;
      for (int64_t i = 0; i < t.prompts_per_step; ++i) {
        auto p = task.Prompt(rng);
        if (i / per_rank == rank()) prompts.push_back(std::move(p));
      }
      generator->Reseed(StreamSeed(t.seed, step, round, 1 + rank()));
      auto results = generator->Generate(Requests(prompts, t.group_size, t.temperature));
      for (const auto& r : results) response_tokens += static_cast<double>(r.tokens.size());
      rl::RolloutBatch batch = MakeBatch(prompts, results, t.group_size);
      reward_sum += batch.scores.sum().item<double>();
      responses += static_cast<double>(batch.size());
      if (!dynamic) {
        all = batch;
        break;
      }
      sampler.Add(batch);
    }
    if (dynamic) all = sampler.Take();
    auto sums = SumOverRanks({reward_sum, responses, response_tokens, static_cast<double>(sampler.dropped_groups()),
                              static_cast<double>(sampler.rounds())});
    (*metrics)["reward_mean"] = sums[0] / sums[1];
    (*metrics)["responses"] = sums[1];
    (*metrics)["response_tokens_mean"] = sums[2] / sums[1];
    if (dynamic) {
      (*metrics)["dropped_groups"] = sums[3];
      (*metrics)["sampling_rounds_mean"] = sums[4] / world();
    }
    return all;
  }

  Status SaveCheckpoint() {
    const fs::path final_dir = output() / CheckpointName(step);
    const fs::path tmp = output() / (CheckpointName(step) + ".tmp");
    comm->Barrier();
    if (rank() == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      CA_RETURN_IF_ERROR(MakeDirs(tmp / "optimizer"));
      CA_RETURN_IF_ERROR(policy->Save(tmp / "policy", config.model.path));
      if (critic) CA_RETURN_IF_ERROR(critic->Save(tmp / "critic", {}, true));
    }
    comm->Barrier();
    const std::string shard = "rank" + std::to_string(rank()) + ".safetensors";
    CA_RETURN_IF_ERROR(learner->actor_optimizer().Save(tmp / "optimizer" / ("actor." + shard)));
    if (critic) CA_RETURN_IF_ERROR(learner->critic_optimizer()->Save(tmp / "optimizer" / ("critic." + shard)));
    comm->Barrier();
    if (rank() == 0) {
      // The weights, the optimizer shards and this; the sampling and prompt
      // streams follow from (seed, step). Written last: the checkpoint's
      // completion marker.
      CA_RETURN_IF_ERROR(WriteFileAtomic(tmp / "config.yaml", config::DumpConfig(config)));
      json state = {{"format", 1},          {"step", step},        {"stage", StageOf(step)},
                    {"seed", config.train.seed}, {"world_size", world()}, {"last_eval", last_eval}};
      CA_RETURN_IF_ERROR(WriteFileAtomic(tmp / "trainer_state.json", state.dump(2) + "\n"));
      std::error_code ec;
      fs::remove_all(final_dir, ec);
      fs::rename(tmp, final_dir, ec);
      if (ec) return Internal("renaming " + tmp.string() + " to " + final_dir.string() + ": " + ec.message());
      // Keep the newest keep_checkpoints.
      std::vector<fs::path> all;
      for (const auto& e : fs::directory_iterator(output()))
        if (e.is_directory() && fs::exists(e.path() / "trainer_state.json") &&
            e.path().filename().string().rfind("step_", 0) == 0)
          all.push_back(e.path());
      std::sort(all.begin(), all.end());
      for (size_t i = 0; i + static_cast<size_t>(config.train.keep_checkpoints) < all.size(); ++i)
        fs::remove_all(all[i], ec);
      CA_LOG(kInfo) << "checkpoint " << final_dir.string();
    }
    comm->Barrier();
    last_checkpoint = final_dir;
    return Status::Ok();
  }

  // Appends one line to metrics.jsonl (rank 0).
  Status WriteMetrics(const json& line) {
    if (rank() != 0) return Status::Ok();
    std::ofstream out(output() / "metrics.jsonl", std::ios::app);
    out << line.dump() << "\n";
    out.flush();
    if (!out) return Internal("writing " + (output() / "metrics.jsonl").string());
    return Status::Ok();
  }

  // After a resume: drops metric lines past the checkpoint (a crash may have
  // left some) and its step's evaluation, which runs again, so the file reads
  // as one run; checkpoints past it in output_dir belong to the discarded
  // continuation and go too.
  Status TrimMetrics() {
    if (rank() != 0) return Status::Ok();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(output(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step_", 0) == 0 && name.substr(0, 11) > CheckpointName(step)) fs::remove_all(e.path(), ec);
    }
    const fs::path path = output() / "metrics.jsonl";
    if (!fs::exists(path)) return Status::Ok();
    CA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    std::istringstream in(text);
    std::string kept, line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      const int64_t at = j.value("step", int64_t{0});
      if (at < step || (at == step && !j.contains("eval_reward"))) kept += line + "\n";
    }
    return WriteFileAtomic(path, kept);
  }
};

fs::path Trainer::LatestCheckpoint(const fs::path& output_dir) {
  fs::path best;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return best;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos &&
        fs::exists(e.path() / "trainer_state.json") && (best.empty() || name > best.filename().string()))
      best = e.path();
  }
  return best;
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const config::Config& config, const std::string& resume,
                                                   rl::Communicator* comm) {
  auto impl = std::make_unique<Impl>(config);
  impl->comm = comm;
  if (!comm) {
    impl->single = rl::Communicator::Single();
    impl->comm = impl->single.get();
  }
  const config::TrainConfig& t = config.train;
  if (t.prompts_per_step % impl->world() != 0)
    return InvalidArgument("train.prompts_per_step: " + std::to_string(t.prompts_per_step) +
                           " is not a multiple of the " + std::to_string(impl->world()) + " ranks");
  CA_ASSIGN_OR_RETURN(rl::LearnerConfig learner_config, MakeLearnerConfig(config.algorithm));
  if (t.rft_steps + t.critic_pretrain_steps > t.steps)
    return InvalidArgument("train.rft_steps + train.critic_pretrain_steps (" +
                           std::to_string(t.rft_steps + t.critic_pretrain_steps) + ") exceed train.steps (" +
                           std::to_string(t.steps) + ")");
  if (t.critic_pretrain_steps > 0 && learner_config.estimator != rl::AdvantageEstimator::kGae)
    return InvalidArgument("train.critic_pretrain_steps: " + std::to_string(t.critic_pretrain_steps) +
                           " needs a critic (algorithm.estimator gae, not " + config.algorithm.estimator + ")");
  learner_config.actor.total_steps = learner_config.critic.total_steps =
      t.steps * config.algorithm.epochs * config.algorithm.mini_batches;

  // Where to start from.
  fs::path checkpoint;
  if (resume == "auto") {
    checkpoint = LatestCheckpoint(t.output_dir);
  } else if (!resume.empty()) {
    checkpoint = resume;
    if (!fs::exists(checkpoint / "trainer_state.json"))
      return NotFound("--resume " + resume + ": not a complete checkpoint (no trainer_state.json)");
  } else if (!LatestCheckpoint(t.output_dir).empty()) {
    return InvalidArgument("train.output_dir " + t.output_dir + " holds checkpoints of an earlier run; resume it " +
                           "(--resume auto) or choose another output_dir");
  }
  json state;
  if (!checkpoint.empty()) {
    CA_ASSIGN_OR_RETURN(std::string text, ReadFile(checkpoint / "trainer_state.json"));
    state = json::parse(text, nullptr, false);
    if (state.is_discarded() || !state.contains("step") || state.value("format", 0) != 1)
      return InvalidArgument((checkpoint / "trainer_state.json").string() +
                             ": not a trainer state of format 1");
    if (state.value("seed", int64_t{-1}) != t.seed)
      return InvalidArgument(checkpoint.string() + ": saved with train.seed " +
                             std::to_string(state.value("seed", int64_t{-1})) + ", resumed with " +
                             std::to_string(t.seed) + " (the run would not continue as it began)");
    if (state.value("world_size", 0) != impl->world())
      return InvalidArgument(checkpoint.string() + ": saved by " + std::to_string(state.value("world_size", 0)) +
                             " ranks, resumed by " + std::to_string(impl->world()) +
                             " (the optimizer state is sharded per rank)");
  }

  // Models.
  impl->options.dtype = config.model.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  if (config.model.device == "cuda")
    impl->options.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rl::LocalDeviceIndex()));
  const int64_t vocab = impl->task.vocab_size();
  model::LoadOptions critic_options = impl->options;
  critic_options.value_head = true;
  const bool with_critic = learner_config.estimator == rl::AdvantageEstimator::kGae;
  if (checkpoint.empty()) {
    CA_ASSIGN_OR_RETURN(impl->policy, InitialModel(config, impl->options, vocab));
    if (with_critic) {
      CA_ASSIGN_OR_RETURN(impl->critic, InitialModel(config, critic_options, vocab));
    }
  } else {
    CA_ASSIGN_OR_RETURN(impl->policy, model::Transformer::Load(checkpoint / "policy", impl->options));
    if (with_critic) {
      CA_ASSIGN_OR_RETURN(impl->critic, model::Transformer::Load(checkpoint / "critic", critic_options));
    }
  }
  if (config.algorithm.kl_coef > 0) {
    CA_ASSIGN_OR_RETURN(impl->reference, InitialModel(config, impl->options, vocab));
  }
  impl->learner = std::make_unique<rl::Learner>(*impl->policy, impl->critic.get(), impl->reference.get(),
                                                learner_config, impl->comm);
  if (!checkpoint.empty()) {
    const std::string shard = "rank" + std::to_string(impl->rank()) + ".safetensors";
    CA_RETURN_IF_ERROR(impl->learner->actor_optimizer().Load(checkpoint / "optimizer" / ("actor." + shard)));
    if (with_critic)
      CA_RETURN_IF_ERROR(impl->learner->critic_optimizer()->Load(checkpoint / "optimizer" / ("critic." + shard)));
    impl->step = state["step"].get<int64_t>();
    impl->last_eval = state.value("last_eval", -1.0);
    impl->last_checkpoint = checkpoint;
  }

  model::GeneratorOptions gen;
  const int64_t per_rank = t.prompts_per_step / impl->world();
  gen.max_batch = std::max(per_rank * t.group_size, (t.eval_prompts + impl->world() - 1) / impl->world());
  gen.max_seq_len = 2 * config.task.length + 2;
  gen.seed = StreamSeed(t.seed, -1, 0, 1 + impl->rank());
  impl->generator = std::make_unique<model::Generator>(*impl->policy, nullptr, gen);

  CA_RETURN_IF_ERROR(MakeDirs(t.output_dir));
  if (impl->rank() == 0) {
    CA_RETURN_IF_ERROR(WriteFileAtomic(fs::path(t.output_dir) / "config.yaml", config::DumpConfig(config)));
    CA_RETURN_IF_ERROR(impl->TrimMetrics());
  }
  if (!checkpoint.empty()) {
    CA_LOG(kInfo) << "resumed from " << checkpoint.string() << " at step " << impl->step;
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

const model::Transformer& Trainer::policy() const { return *impl_->policy; }
int64_t Trainer::step() const { return impl_->step; }

StatusOr<TrainResult> Trainer::Run() {
  Impl& m = *impl_;
  const config::TrainConfig& t = m.config.train;
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  TrainResult result;
  const int64_t mini_batches = m.config.algorithm.mini_batches;
  while (true) {
    // The policy after m.step updates, on held-out prompts.
    if (t.eval_every > 0 && (m.step % t.eval_every == 0 || m.step == t.steps)) {
      m.last_eval = m.Evaluate();
      CA_RETURN_IF_ERROR(m.WriteMetrics({{"step", m.step}, {"eval_reward", m.last_eval}}));
      if (m.rank() == 0) {
        CA_LOG(kInfo) << "step " << m.step << " greedy evaluation: reward " << m.last_eval;
      }
      if (t.target_reward > 0 && m.last_eval >= t.target_reward) result.target_reached = m.step;
    }
    if (m.step >= t.steps || result.target_reached >= 0) break;
    const std::string stage = m.StageOf(m.step);
    json line = {{"stage", stage}};
    const auto start = Clock::now();
    rl::RolloutBatch batch = m.Rollouts(stage == "rl" && m.config.algorithm.dynamic_sampling, &line);
    if (stage == "rft") {
      batch = batch.Select(batch.scores >= t.rft_min_reward);
      line["rft_kept"] = m.SumOverRanks({static_cast<double>(batch.size())})[0];
    }
    const auto rolled = Clock::now();
    // Every rank updates or none does (the update's collectives must pair up).
    const bool short_batch = batch.size() < (stage == "rl" ? mini_batches : 1);
    if (m.SumOverRanks({short_batch ? 1.0 : 0.0})[0] == 0) {
      batch = batch.To(m.options.device);
      rl::UpdateMetrics u;
      if (stage == "rft") {
        u = m.learner->FineTune(batch);
      } else {
        m.learner->ComputeAdvantages(batch);
        u = stage == "critic_pretrain" ? m.learner->PretrainCritic(batch) : m.learner->Update(batch);
      }
      for (const auto& [k, v] : u.values) line[k] = v;
    } else {
      line["update_skipped"] = true;  // too few kept rows (groups with reward spread) on some rank
    }
    m.generator->ResetCache();
    const auto updated = Clock::now();
    ++m.step;
    line["step"] = m.step;
    line["rollout_s"] = seconds(start, rolled);
    line["update_s"] = seconds(rolled, updated);
    CA_RETURN_IF_ERROR(m.WriteMetrics(line));
    if (m.rank() == 0) {
      std::ostringstream msg;
      msg << std::fixed << std::setprecision(3) << "step " << m.step << "/" << t.steps << " " << stage << " reward "
          << line["reward_mean"].get<double>();
      for (const char* k : {"policy_loss", "sft_loss", "value_loss"})
        if (line.contains(k)) msg << " " << k << " " << line[k].get<double>();
      msg << " (" << std::setprecision(2) << seconds(start, updated) << " s)";
      CA_LOG(kInfo) << msg.str();
    }
    if (t.checkpoint_every > 0 && m.step % t.checkpoint_every == 0) CA_RETURN_IF_ERROR(m.SaveCheckpoint());
  }
  if (m.last_checkpoint.filename() != CheckpointName(m.step)) CA_RETURN_IF_ERROR(m.SaveCheckpoint());
  result.step = m.step;
  result.last_eval = m.last_eval;
  return result;
}

}  // namespace cuda_agent::trainer

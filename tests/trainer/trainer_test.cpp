// The training loop: a small policy learns a verifiable task from chance to
// >= 90% greedy reward with PPO + critic and with DAPO (CPU, seconds); a run
// resumed from a checkpoint, on one rank or two (Gloo), ends exactly where
// the uninterrupted run does; bad runs are refused with a reason.
#include "cuda_agent/trainer/trainer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/log.h"
#include "rl/distributed_fixture.h"

namespace cuda_agent::trainer {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// This process's runs, removed when it exits.
const fs::path kRoot = fs::temp_directory_path() / ("cuda-agent-trainer-test-" + std::to_string(::getpid()));
struct RemoveRoot {
  ~RemoveRoot() {
    std::error_code ec;
    fs::remove_all(kRoot, ec);
  }
} remove_root;

fs::path FreshDir(const std::string& name) {
  fs::path dir = kRoot / name;
  fs::remove_all(dir);
  return dir;
}

config::Config Defaults(const fs::path& dir) {
  log::SetLevel(log::Level::kWarn);
  config::Config c;
  c.train.output_dir = dir.string();
  return c;
}

// metrics.jsonl without the timings.
std::vector<json> Metrics(const fs::path& dir) {
  std::vector<json> lines;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    j.erase("rollout_s");
    j.erase("update_s");
    lines.push_back(j);
  }
  return lines;
}

void ExpectSameParameters(const model::Transformer& a, const model::Transformer& b) {
  ASSERT_EQ(a.parameters().size(), b.parameters().size());
  for (size_t i = 0; i < a.parameters().size(); ++i)
    EXPECT_TRUE(at::equal(a.parameters()[i].second, b.parameters()[i].second)) << a.parameters()[i].first;
}

TrainResult Train(const config::Config& c, const std::string& resume = "", rl::Communicator* comm = nullptr) {
  auto trainer = Trainer::Create(c, resume, comm);
  EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto result = (*trainer)->Run();
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return *result;
}

TEST(SyntheticTaskTest, AnswersAndPartialRewards) {
  config::TaskConfig t;
  t.length = 4;
  t.symbols = 5;
  const std::vector<int32_t> prompt{SyntheticTask::kBos, 5, 2, 6, 2, SyntheticTask::kSep};
  for (auto [kind, answer] : {std::pair<std::string, std::vector<int32_t>>{"copy", {5, 2, 6, 2}},
                              {"reverse", {2, 6, 2, 5}},
                              {"sort", {2, 2, 5, 6}}}) {
    t.kind = kind;
    SyntheticTask task(t);
    EXPECT_EQ(task.Answer(prompt), answer) << kind;
    EXPECT_DOUBLE_EQ(task.Reward(prompt, answer), 1.0) << kind;
    std::vector<int32_t> half = answer;
    half[1] = half[3] = 0;
    EXPECT_DOUBLE_EQ(task.Reward(prompt, half), 0.5) << kind;
    EXPECT_DOUBLE_EQ(task.Reward(prompt, {answer[0]}), 0.25) << kind << ": a short response";
  }
  std::mt19937_64 rng(3);
  SyntheticTask task(t);
  for (int i = 0; i < 100; ++i) {
    auto p = task.Prompt(rng);
    ASSERT_EQ(p.size(), 6u);
    EXPECT_EQ(p.front(), SyntheticTask::kBos);
    EXPECT_EQ(p.back(), SyntheticTask::kSep);
    for (size_t k = 1; k < 5; ++k) EXPECT_TRUE(p[k] >= 2 && p[k] <= 6) << p[k];
  }
  EXPECT_EQ(task.vocab_size(), 7);
}

void ExpectLearnsToCopy(config::Config c, const std::string& name) {
  TrainResult r = Train(c);
  auto metrics = Metrics(c.train.output_dir);
  ASSERT_FALSE(metrics.empty());
  const double first = metrics.front().at("eval_reward").get<double>();
  EXPECT_LT(first, 0.3) << "the untrained policy should be near chance";
  EXPECT_GE(r.target_reached, 0) << name << " did not reach 90% greedy reward in " << c.train.steps << " steps";
  EXPECT_GE(r.last_eval, 0.9);
  std::cout << name << ": 90% at step " << r.target_reached << " (start " << first << ")\n";
}

TEST(TrainerLearningTest, PpoWithACriticLearnsToCopy) {
  ExpectLearnsToCopy(Defaults(FreshDir("ppo")), "PPO + critic");
}

TEST(TrainerLearningTest, DapoLearnsToCopy) {
  config::Config c = Defaults(FreshDir("dapo"));
  c.algorithm.estimator = "grpo";
  c.algorithm.dynamic_sampling = true;
  ExpectLearnsToCopy(c, "DAPO");
}

// Rejection fine-tuning, then critic pretraining, then PPO: fine-tuning on
// the policy's own correct answers raises its greedy reward, pretraining
// raises the critic's explained variance and leaves the policy alone, and PPO
// takes it to the target.
TEST(TrainerLearningTest, StagesRftThenCriticPretrainingThenPpo) {
  config::Config c = Defaults(FreshDir("stages"));
  c.train.rft_steps = 30;
  c.train.rft_min_reward = 2.0 / 3;  // two of the three symbols right
  c.train.critic_pretrain_steps = 20;
  TrainResult r = Train(c);
  std::map<int64_t, json> eval, update;
  for (const json& j : Metrics(c.train.output_dir))
    (j.contains("eval_reward") ? eval : update)[j.at("step").get<int64_t>()] = j;
  for (int64_t s = 1; s <= 30; ++s) {
    EXPECT_EQ(update[s].at("stage"), "rft") << s;
    EXPECT_TRUE(update[s].contains("sft_loss")) << s;
  }
  EXPECT_GT(eval.at(30).at("eval_reward").get<double>(), eval.at(0).at("eval_reward").get<double>() + 0.1)
      << "rejection fine-tuning should raise the greedy reward";
  for (int64_t s = 31; s <= 50; ++s) {
    EXPECT_EQ(update[s].at("stage"), "critic_pretrain") << s;
    EXPECT_FALSE(update[s].contains("policy_loss")) << s;
  }
  EXPECT_DOUBLE_EQ(eval.at(40).at("eval_reward").get<double>(), eval.at(50).at("eval_reward").get<double>())
      << "critic pretraining must leave the policy unchanged";
  EXPECT_GT(update[50].at("explained_variance").get<double>(), update[31].at("explained_variance").get<double>());
  EXPECT_EQ(update[51].at("stage"), "rl");
  EXPECT_GE(r.target_reached, 0) << "PPO after the stages did not reach 90% in " << c.train.steps << " steps";
  std::cout << "RFT -> critic pretraining -> PPO: 90% at step " << r.target_reached << "\n";
}

config::Config ShortRun(const fs::path& dir, int64_t steps) {
  config::Config c = Defaults(dir);
  c.train.steps = steps;
  c.train.rft_steps = 1;  // the resume below crosses from critic pretraining into PPO
  c.train.rft_min_reward = 1.0 / 3;
  c.train.critic_pretrain_steps = 2;
  c.train.checkpoint_every = 3;
  c.train.eval_every = 2;
  c.train.eval_prompts = 8;
  c.train.target_reward = 0;
  return c;
}

TEST(TrainerTest, ResumedRunEqualsTheUninterruptedRun) {
  const fs::path whole = FreshDir("whole"), split = FreshDir("split");
  auto a = Trainer::Create(ShortRun(whole, 6), "", nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->Run().ok());

  ASSERT_EQ(Train(ShortRun(split, 3)).step, 3);  // stops at a checkpoint, as a crash after it would
  auto b = Trainer::Create(ShortRun(split, 6), "auto", nullptr);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->step(), 3);
  ASSERT_TRUE((*b)->Run().ok());
  ExpectSameParameters((*a)->policy(), (*b)->policy());
  EXPECT_EQ(Metrics(whole), Metrics(split));
  for (const char* f : {"policy/model.safetensors", "critic/model.safetensors", "optimizer/actor.rank0.safetensors",
                        "optimizer/critic.rank0.safetensors", "trainer_state.json"})
    EXPECT_TRUE(fs::exists(split / "step_000006" / f)) << f;
  EXPECT_EQ(Trainer::LatestCheckpoint(split), split / "step_000006");

  // Resuming from the earlier checkpoint discards the later one and ends in the same place.
  auto again = Trainer::Create(ShortRun(split, 6), (split / "step_000003").string(), nullptr);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(fs::exists(split / "step_000006"));
  ASSERT_TRUE((*again)->Run().ok());
  ExpectSameParameters((*a)->policy(), (*again)->policy());
  EXPECT_EQ(Metrics(whole), Metrics(split));
}

TEST(TrainerTest, TwoGlooRanksResumeTheirShardsExactly) {
  const fs::path whole = FreshDir("whole2"), split = FreshDir("split2");
  config::Config c = ShortRun(whole, 4);
  c.algorithm.estimator = "grpo";  // no critic: the other model kind
  c.train.critic_pretrain_steps = 0;
  std::vector<std::unique_ptr<Trainer>> full(2), resumed(2);
  rl::testing_fixture::OnTwoRanks([&](int rank, rl::Communicator* comm) {
    auto t = Trainer::Create(c, "", comm);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Run().ok());
    full[rank] = std::move(*t);
  });
  config::Config s = c;
  s.train.output_dir = split.string();
  s.train.steps = 3;
  rl::testing_fixture::OnTwoRanks([&](int, rl::Communicator* comm) { ASSERT_TRUE(Train(s, "", comm).step == 3); });
  EXPECT_TRUE(fs::exists(split / "step_000003" / "optimizer" / "actor.rank1.safetensors"));
  s.train.steps = 4;
  rl::testing_fixture::OnTwoRanks([&](int rank, rl::Communicator* comm) {
    auto t = Trainer::Create(s, "auto", comm);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Run().ok());
    resumed[rank] = std::move(*t);
  });
  ExpectSameParameters(full[0]->policy(), full[1]->policy());  // the ranks agree
  ExpectSameParameters(full[0]->policy(), resumed[0]->policy());
  ExpectSameParameters(full[1]->policy(), resumed[1]->policy());
  EXPECT_EQ(Metrics(whole), Metrics(split));

  // One rank cannot take over the two ranks' optimizer shards.
  auto single = Trainer::Create(s, "auto", nullptr);
  ASSERT_FALSE(single.ok());
  EXPECT_NE(single.status().message().find("saved by 2 ranks"), std::string::npos) << single.status().ToString();
}

TEST(TrainerTest, RefusesRunsThatCannotWork) {
  const fs::path dir = FreshDir("refuse");
  Train(ShortRun(dir, 3));
  auto again = Trainer::Create(ShortRun(dir, 3), "", nullptr);  // would overwrite the earlier run
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("--resume auto"), std::string::npos) << again.status().ToString();

  config::Config reseeded = ShortRun(dir, 6);
  reseeded.train.seed = 5;
  auto seed = Trainer::Create(reseeded, "auto", nullptr);
  ASSERT_FALSE(seed.ok());
  EXPECT_NE(seed.status().message().find("train.seed 0"), std::string::npos) << seed.status().ToString();

  auto missing = Trainer::Create(ShortRun(FreshDir("other"), 3), (dir / "step_000002").string(), nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  config::Config c = ShortRun(FreshDir("bad"), 3);
  c.algorithm.dual_clip = 0.5;
  auto dual = Trainer::Create(c, "", nullptr);
  ASSERT_FALSE(dual.ok());
  EXPECT_NE(dual.status().message().find("algorithm.dual_clip"), std::string::npos);

  c = ShortRun(FreshDir("stages"), 3);
  c.train.critic_pretrain_steps = 5;
  auto stages = Trainer::Create(c, "", nullptr);
  ASSERT_FALSE(stages.ok());
  EXPECT_NE(stages.status().message().find("exceed train.steps"), std::string::npos) << stages.status().ToString();
  c.train.critic_pretrain_steps = 1;
  c.algorithm.estimator = "grpo";
  auto no_critic = Trainer::Create(c, "", nullptr);
  ASSERT_FALSE(no_critic.ok());
  EXPECT_NE(no_critic.status().message().find("needs a critic"), std::string::npos) << no_critic.status().ToString();

  c = ShortRun(FreshDir("heads"), 3);
  c.model.heads = 3;
  auto heads = Trainer::Create(c, "", nullptr);
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.status().message().find("heads (3)"), std::string::npos) << heads.status().ToString();

  c = ShortRun(FreshDir("split3"), 3);
  c.train.prompts_per_step = 3;
  rl::testing_fixture::OnTwoRanks([&](int, rl::Communicator* comm) {
    auto t = Trainer::Create(c, "", comm);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("not a multiple of the 2 ranks"), std::string::npos);
  });
}

}  // namespace
}  // namespace cuda_agent::trainer

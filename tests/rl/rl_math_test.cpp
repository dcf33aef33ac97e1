// Estimators and losses against golden values from scripts/rl_golden.py
// (NumPy, straight from the papers' formulas), plus the property that
// micro-batch gradients with the global scale add up to the full batch's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cuda_agent/rl/advantages.h"
#include "cuda_agent/rl/losses.h"
#include "cuda_agent/rl/optimizer.h"
#include "cuda_agent/util/file.h"

namespace cuda_agent::rl {
namespace {
using nlohmann::json;

const json& Golden() {
  static const json g =
      json::parse(ReadFile(std::filesystem::path(CUDA_AGENT_TEST_FIXTURES) / "rl" / "golden.json").value());
  return g;
}

at::Tensor Matrix(const json& rows) {
  std::vector<double> flat;
  for (const auto& r : rows)
    for (const auto& x : r) flat.push_back(x.get<double>());
  return at::tensor(flat, at::kDouble).view({static_cast<int64_t>(rows.size()), -1}).to(at::kFloat);
}
at::Tensor Vector(const json& v) { return at::tensor(v.get<std::vector<double>>(), at::kDouble).to(at::kFloat); }
at::Tensor Mask() { return Matrix(Golden()["mask"]).to(at::kBool); }

void ExpectClose(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LT((got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>(), tol) << what;
}

TEST(AdvantagesTest, GaeFollowsActionTokensAcrossToolOutputs) {
  const json& g = Golden();
  for (const auto& c : g["gae"]) {
    at::Tensor returns;
    at::Tensor adv = GaeAdvantages(Matrix(g["rewards"]), Matrix(g["values"]), Mask(), c["gamma"], c["lambda"], &returns);
    std::string what = "gamma " + c["gamma"].dump() + " lambda " + c["lambda"].dump();
    ExpectClose(adv, Matrix(c["advantages"]), 1e-5, what);
    ExpectClose(returns, Matrix(c["returns"]), 1e-5, what);
  }
}

TEST(AdvantagesTest, GroupEstimatorsMatch) {
  const json& g = Golden();
  at::Tensor scores = Vector(g["scores"]);
  at::Tensor groups = at::tensor(g["groups"].get<std::vector<int64_t>>(), at::kLong);
  ExpectClose(GroupNormalizedAdvantages(scores, groups, true), Vector(g["grpo_std"]), 1e-5, "grpo");
  ExpectClose(GroupNormalizedAdvantages(scores, groups, false), Vector(g["grpo_nostd"]), 1e-5, "grpo without std");
  ExpectClose(RlooAdvantages(scores, groups), Vector(g["rloo"]), 1e-5, "rloo");
  auto spread = GroupsWithSpread(scores, groups);
  for (int64_t i = 0; i < spread.numel(); ++i) EXPECT_EQ(spread[i].item<bool>(), g["spread"][i].get<bool>()) << i;
  at::Tensor tokens = TokenAdvantages(at::tensor({2.0, -1.0}), at::tensor({1, 0, 1, 0, 1, 1}).to(at::kBool).view({2, 3}));
  ExpectClose(tokens, at::tensor({2.0, 0.0, 2.0, 0.0, -1.0, -1.0}).view({2, 3}), 1e-7, "token advantages");
}

TEST(AdvantagesTest, OverlongPunishmentIsLinearInTheCacheZone) {
  for (const auto& c : Golden()["overlong"])
    EXPECT_DOUBLE_EQ(OverlongPenalty(c[0].get<int64_t>(), c[1].get<int64_t>(), c[2].get<int64_t>()), c[3].get<double>())
        << c.dump();
}

LossAggregation Mode(const json& c) {
  return c["mode"] == "token_mean" ? LossAggregation::kTokenMean : LossAggregation::kSequenceMean;
}

TEST(LossesTest, PolicyLossAndItsStatsMatchAtTheClipBoundaries) {
  const json& g = Golden();
  LossScale scale{g["tokens"], g["sequences"]};
  for (const auto& c : g["policy"]) {
    PolicyLossConfig config;
    config.dual_clip = c["dual_clip"];
    config.aggregation = Mode(c);
    PolicyLossStats s;
    at::Tensor loss = PolicyLoss(Matrix(g["logprobs"]), Matrix(g["old_logprobs"]), Matrix(g["advantages"]), Mask(),
                                 config, scale, &s);
    std::string what = c["mode"].get<std::string>() + " dual " + c["dual_clip"].dump();
    EXPECT_NEAR(loss.item<double>(), c["loss"].get<double>(), 1e-5) << what;
    EXPECT_NEAR(s.clip_fraction_low, c["clip_fraction_low"].get<double>(), 1e-9) << what;
    EXPECT_NEAR(s.clip_fraction_high, c["clip_fraction_high"].get<double>(), 1e-9) << what;
    EXPECT_NEAR(s.dual_clip_fraction, c["dual_clip_fraction"].get<double>(), 1e-9) << what;
    EXPECT_NEAR(s.approx_kl, c["approx_kl"].get<double>(), 1e-6) << what;
    EXPECT_NEAR(s.ratio_mean, c["ratio_mean"].get<double>(), 1e-5) << what;
    EXPECT_NEAR(s.ratio_max, c["ratio_max"].get<double>(), 1e-5) << what;
    EXPECT_NEAR(s.ratio_min, c["ratio_min"].get<double>(), 1e-5) << what;
  }
}

TEST(LossesTest, ValueLossEntropyKlAndExplainedVarianceMatch) {
  const json& g = Golden();
  LossScale scale{g["tokens"], g["sequences"]};
  for (const auto& c : g["value"]) {
    double frac = -1;
    at::Tensor loss = ValueLoss(Matrix(g["values"]), Matrix(c["old_values"]), Matrix(c["returns"]), Mask(), 0.2,
                                Mode(c), scale, &frac);
    EXPECT_NEAR(loss.item<double>(), c["loss"].get<double>(), 1e-5) << c["mode"];
    EXPECT_NEAR(frac, c["clip_fraction"].get<double>(), 1e-9) << c["mode"];
  }
  std::vector<double> flat;
  for (const auto& a : g["entropy_logits"])
    for (const auto& b : a)
      for (const auto& x : b) flat.push_back(x);
  at::Tensor logits = at::tensor(flat, at::kDouble).view({2, 3, 7}).to(at::kFloat);
  ExpectClose(TokenLogprobsAndEntropy(logits, at::zeros({2, 3}, at::kLong)).entropy, Matrix(g["entropy"]), 1e-5,
              "entropy");
  ExpectClose(KlPenalty(Matrix(g["logprobs"]), Matrix(g["ref_logprobs"]), KlEstimator::kK1), Matrix(g["kl_k1"]), 1e-5,
              "k1");
  ExpectClose(KlPenalty(Matrix(g["logprobs"]), Matrix(g["ref_logprobs"]), KlEstimator::kK3), Matrix(g["kl_k3"]), 1e-5,
              "k3");
  EXPECT_NEAR(ExplainedVariance(Matrix(g["values"]), Matrix(g["ev_returns"]), Mask()),
              g["explained_variance"].get<double>(), 1e-5);
}

// Splitting the batch into micro-batches, each normalised by the global
// counts, gives the same loss and gradient as the whole batch, for both
// aggregations: what makes gradient accumulation exact.
TEST(LossesTest, MicroBatchGradientsAddUpToTheFullBatch) {
  const json& g = Golden();
  at::Tensor mask = Mask();
  LossScale scale = ScaleOf(mask);
  EXPECT_EQ(scale.tokens, g["tokens"].get<double>());
  EXPECT_EQ(scale.sequences, g["sequences"].get<double>());
  for (auto mode : {LossAggregation::kTokenMean, LossAggregation::kSequenceMean}) {
    PolicyLossConfig config;
    config.aggregation = mode;
    at::Tensor full_logp = Matrix(g["logprobs"]).requires_grad_(true);
    at::Tensor full = PolicyLoss(full_logp, Matrix(g["old_logprobs"]), Matrix(g["advantages"]), mask, config, scale);
    full.backward();
    at::Tensor micro_logp = Matrix(g["logprobs"]).requires_grad_(true);
    double total = 0;
    for (auto [begin, size] : {std::pair<int64_t, int64_t>{0, 2}, {2, 1}, {3, 2}}) {
      at::Tensor loss = PolicyLoss(micro_logp.narrow(0, begin, size), Matrix(g["old_logprobs"]).narrow(0, begin, size),
                                   Matrix(g["advantages"]).narrow(0, begin, size), mask.narrow(0, begin, size), config,
                                   scale);
      loss.backward();
      total += loss.item<double>();
    }
    EXPECT_NEAR(total, full.item<double>(), 1e-6);
    ExpectClose(micro_logp.grad(), full_logp.grad(), 1e-7, "gradients");
  }
}

// Three steps, the first and last clipped to the global norm, against AdamW
// with clipping written out in NumPy.
TEST(OptimizerTest, AdamWWithGlobalNormClippingMatchesTheReference) {
  const json& g = Golden()["adamw"];
  OptimizerConfig config;
  config.lr = g["lr"];
  config.beta1 = g["beta1"];
  config.beta2 = g["beta2"];
  config.eps = g["eps"];
  config.weight_decay = g["weight_decay"];
  config.max_grad_norm = g["max_grad_norm"];
  std::vector<at::Tensor> params;
  for (const auto& p : g["start"]) params.push_back(Matrix(p).requires_grad_(true));
  AdamW opt(params, config);
  for (const auto& step : g["steps"]) {
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = Matrix(step["grads"][i]);
    EXPECT_NEAR(opt.Step(), step["grad_norm"].get<double>(), 1e-5);
    for (size_t i = 0; i < params.size(); ++i) {
      ExpectClose(params[i].detach(), Matrix(step["params"][i]), 2e-6, "parameter " + std::to_string(i));
      EXPECT_EQ(params[i].grad().abs().max().item<double>(), 0) << "gradients are zeroed";
    }
  }
}

}  // namespace
}  // namespace cuda_agent::rl

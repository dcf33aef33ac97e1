#include "cuda_agent/kernel_eval/reward.h"

#include <gtest/gtest.h>

#include "cuda_agent/kernel_eval/timing_checks.h"

namespace cuda_agent::kernel_eval {
namespace {

Verdict Timed(double cand, double eager, double compiled) {
  Verdict v;
  v.outcome = Outcome::kOk;
  v.timed = true;
  v.candidate.median_ms = cand;
  v.eager.median_ms = eager;
  v.compiled.median_ms = compiled;
  v.speedup_vs_eager = eager / cand;
  v.speedup_vs_compile = compiled / cand;
  return v;
}

TEST(RewardTest, MilestonesOfThePaper) {
  // "More than 5% faster": (t_base - t) / t_base > 0.05.
  EXPECT_EQ(ComputeReward(Timed(1.0, 1.0, 1.0), RewardKind::kMilestone, 0.05), 1);
  EXPECT_EQ(ComputeReward(Timed(0.96, 1.0, 0.5), RewardKind::kMilestone, 0.05), 1);  // 4%: not enough
  EXPECT_EQ(ComputeReward(Timed(0.94, 1.0, 0.5), RewardKind::kMilestone, 0.05), 2);
  EXPECT_EQ(ComputeReward(Timed(0.94, 1.0, 0.99), RewardKind::kMilestone, 0.05), 3);
  EXPECT_EQ(ComputeReward(Timed(0.5, 1.0, 0.3), RewardKind::kMilestone, 0.05), 2);  // beats eager only
  for (Outcome o : {Outcome::kCompileError, Outcome::kIncorrect, Outcome::kForbidden, Outcome::kTimeout}) {
    Verdict v = Timed(0.1, 1, 1);
    v.outcome = o;
    EXPECT_EQ(ComputeReward(v, RewardKind::kMilestone, 0.05), -1) << OutcomeName(o);
    EXPECT_EQ(ComputeReward(v, RewardKind::kSpeedup, 0.05), -1);
    EXPECT_EQ(ComputeReward(v, RewardKind::kKevin, 0.05), 0);
  }
}

TEST(RewardTest, SpeedupAndKevin) {
  EXPECT_DOUBLE_EQ(ComputeReward(Timed(0.5, 1.0, 2.0), RewardKind::kSpeedup, 0.05), 2.0);
  EXPECT_DOUBLE_EQ(ComputeReward(Timed(0.5, 1.0, 2.0), RewardKind::kKevin, 0.05), 2.3);
  RewardKind k;
  EXPECT_TRUE(ParseRewardKind("kevin", &k));
  EXPECT_FALSE(ParseRewardKind("best", &k));
}

TEST(TimingChecksTest, WallClockMustBeExplainedByReportedTimes) {
  LoopEvidence baseline{/*wall_ms=*/130, /*sum_ms=*/100, /*trials=*/10};  // 3 ms overhead per call
  std::string why;
  // Honest: 10 calls of 5 ms plus 3 ms overhead each = 80 ms.
  EXPECT_FALSE(TimingsForged(baseline, {85, 50, 10}, 2.0, 0, &why));
  // Forged: reports 0.1 ms calls, but the loop took 300 ms.
  EXPECT_TRUE(TimingsForged(baseline, {300, 1, 10}, 2.0, 0, &why));
  EXPECT_NE(why.find("300"), std::string::npos);
}

TEST(TimingChecksTest, PhysicalLimit) {
  // 4.8 GB through 4800 GB/s takes 1 ms; 990 GFLOP at 990 TFLOP/s takes 1 ms.
  EXPECT_NEAR(PhysicalLimitMs(4.8e9, 0, 4800, 990), 1.0, 1e-9);
  EXPECT_NEAR(PhysicalLimitMs(0, 1.98e12, 4800, 990), 2.0, 1e-9);
  EXPECT_EQ(DefaultBandwidthGbs("cuda", "NVIDIA H200"), 4800);
}

TEST(VerdictTest, JsonAndSummaryNameTheOutcome) {
  Verdict v = Timed(0.5, 1, 1);
  v.message = "correct on every check";
  auto j = v.ToJson();
  EXPECT_EQ(j["outcome"], "OK");
  EXPECT_EQ(j["timing"]["candidate"]["median_ms"], 0.5);
  EXPECT_NE(v.Summary().find("2.000x vs eager"), std::string::npos) << v.Summary();
  Outcome o;
  EXPECT_TRUE(ParseOutcome("FORBIDDEN", &o));
  EXPECT_EQ(o, Outcome::kForbidden);
  TimingStats s = TimingStats::FromSamples({3, 1, 2, 10});
  EXPECT_DOUBLE_EQ(s.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(s.min_ms, 1);
}

}  // namespace
}  // namespace cuda_agent::kernel_eval

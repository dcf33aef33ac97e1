// End-to-end judge runs on the cpu backend: real torch, torch.compile, g++ and
// the sandbox. Each test judges one candidate from fixtures/.
#include "cuda_agent/kernel_eval/judge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/loopback_listener.h"
#include "cuda_agent/config/config.h"
#include "cuda_agent/kernel_eval/reward.h"

namespace cuda_agent::kernel_eval {
namespace {
namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(CUDA_AGENT_TEST_FIXTURES) / "kernel_eval" / "fixtures";

class JudgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the judge's sandbox needs root";
  }

  // Judges fixtures/<candidate> against fixtures/tasks/<task>.py.
  static StatusOr<Verdict> Judge(const std::string& task, const fs::path& candidate,
                                 std::vector<std::string> overrides = {}) {
    std::vector<std::string> all = {"judge.backend=cpu", std::string("judge.cache_dir=") + CUDA_AGENT_TEST_CACHE,
                                    "judge.warmup_trials=2", "judge.timed_trials=10", "judge.run_timeout_s=180"};
    all.insert(all.end(), overrides.begin(), overrides.end());
    auto config = config::LoadConfig("", all);
    if (!config.ok()) return config.status();
    auto judge = Judge::Create(config->judge, config->sandbox);
    if (!judge.ok()) return judge.status();
    auto t = LoadTask(kFixtures / "tasks" / (task + ".py"));
    if (!t.ok()) return t.status();
    auto c = LoadCandidate(candidate.is_absolute() ? candidate : kFixtures / candidate);
    if (!c.ok()) return c.status();
    return (*judge)->Evaluate(*t, *c);
  }

  static Verdict MustJudge(const std::string& task, const fs::path& candidate,
                           std::vector<std::string> overrides = {}) {
    auto v = Judge(task, candidate, std::move(overrides));
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (!v.ok()) return Verdict{};
    return *v;
  }
};

std::string Describe(const Verdict& v) { return v.ToJson().dump(1).substr(0, 6000); }

// ---- honest candidates: OK, with the reward their timings earn ----

struct Honest {
  const char* task;
  const char* candidate;
};
void PrintTo(const Honest& h, std::ostream* os) { *os << h.task << ":" << h.candidate; }

class HonestTest : public JudgeTest, public ::testing::WithParamInterface<Honest> {};

TEST_P(HonestTest, IsOkWithTheMilestoneReward) {
  Verdict v = MustJudge(GetParam().task, GetParam().candidate);
  ASSERT_EQ(v.outcome, Outcome::kOk) << Describe(v);
  EXPECT_TRUE(v.timed);
  EXPECT_EQ(v.checks.size(), 5u + 3u + 1u + 2u);  // checks, hidden variants, timed calls, post-timing checks
  for (const auto& c : v.checks) EXPECT_TRUE(c.passed) << c.tag;
  EXPECT_GT(v.candidate.median_ms, 0);
  EXPECT_GT(v.eager.median_ms, 0);
  EXPECT_GT(v.compiled.median_ms, 0);
  EXPECT_EQ(v.reward, ComputeReward(v, RewardKind::kMilestone, 0.05));
  EXPECT_GE(v.reward, 1);
  EXPECT_TRUE(v.cheats.empty());
  EXPECT_EQ(v.environment["isolation"], "full");
}

INSTANTIATE_TEST_SUITE_P(Ops, HonestTest,
                         ::testing::Values(Honest{"relu", "cpu/relu_ok.py"}, Honest{"add", "cpu/add_ok.py"},
                                           Honest{"scale_bias", "cpu/scale_bias_ws"},
                                           Honest{"softmax", "cpu/softmax_ok.py"}, Honest{"row_sum", "cpu/row_sum_ws"},
                                           Honest{"matmul", "cpu/matmul_ok.py"}),
                         [](const auto& info) { return std::string(info.param.task); });

// ---- plain failures ----

TEST_F(JudgeTest, WrongResultIsIncorrect) {
  Verdict v = MustJudge("relu", "cpu/relu_wrong.py");
  EXPECT_EQ(v.outcome, Outcome::kIncorrect) << Describe(v);
  EXPECT_NE(v.message.find("elements differ"), std::string::npos) << v.message;
  EXPECT_EQ(v.reward, -1);
}

TEST_F(JudgeTest, CompileErrorCarriesTheCompilerMessage) {
  Verdict v = MustJudge("relu", "cpu/relu_compile_error.py");
  EXPECT_EQ(v.outcome, Outcome::kCompileError) << Describe(v);
  EXPECT_NE(v.compile_log.find("error: expected ';'"), std::string::npos) << v.compile_log;
  EXPECT_EQ(v.reward, -1);
}

TEST_F(JudgeTest, PythonSyntaxErrorIsACompileError) {
  Verdict v = MustJudge("relu", "cpu/syntax_error.py");
  EXPECT_EQ(v.outcome, Outcome::kCompileError) << Describe(v);
  EXPECT_NE(v.message.find("syntax error"), std::string::npos);
}

TEST_F(JudgeTest, WorkspaceWithoutBindingIsACompileError) {
  fs::path ws = fs::temp_directory_path() / "judge-test-ws";
  fs::remove_all(ws);
  fs::create_directories(ws / "kernels");
  fs::copy_file(kFixtures / "cpu" / "row_sum_ws" / "model_new.py", ws / "model_new.py");
  fs::copy_file(kFixtures / "cpu" / "row_sum_ws" / "kernels" / "row_sum.cpp", ws / "kernels" / "row_sum.cpp");
  Verdict v = MustJudge("row_sum", ws);
  EXPECT_EQ(v.outcome, Outcome::kCompileError) << Describe(v);
  EXPECT_NE(v.compile_log.find("no kernels/*_binding.cpp"), std::string::npos) << v.compile_log;
}

TEST_F(JudgeTest, SecondBuildOfTheSameSourcesComesFromTheCache) {
  Verdict first = MustJudge("row_sum", "cpu/row_sum_ws");
  Verdict second = MustJudge("row_sum", "cpu/row_sum_ws");
  ASSERT_EQ(first.outcome, Outcome::kOk) << Describe(first);
  ASSERT_EQ(second.outcome, Outcome::kOk) << Describe(second);
  EXPECT_TRUE(second.environment["compile_cached"].get<bool>());
  EXPECT_NE(second.compile_log.find("reused the cached build"), std::string::npos);
  EXPECT_LT(second.phase_seconds["compile"], 1.0);
}

// Regression (seen on the GPU host, whose Python lives outside /root): a cache
// directory under a private parent must still be reachable from the sandbox.
TEST_F(JudgeTest, CacheUnderAPrivateDirectoryWorks) {
  fs::path parent = fs::temp_directory_path() / ("private-parent-" + std::to_string(::getpid()));
  fs::create_directories(parent);
  fs::permissions(parent, fs::perms::owner_all, fs::perm_options::replace);
  Verdict v = MustJudge("row_sum", "cpu/row_sum_ws", {"judge.cache_dir=" + (parent / "cache").string()});
  EXPECT_EQ(v.outcome, Outcome::kOk) << Describe(v);
  fs::remove_all(parent);
}

TEST_F(JudgeTest, DegenerateTaskIsFlagged) {
  Verdict v = MustJudge("constant", "cpu/zeros_ok.py");
  EXPECT_EQ(v.outcome, Outcome::kOk) << Describe(v);
  ASSERT_FALSE(v.warnings.empty());
  EXPECT_NE(v.warnings[0].find("degenerate"), std::string::npos);
}

TEST_F(JudgeTest, BrokenTaskIsAnErrorNotAVerdict) {
  auto v = Judge("raises", "cpu/relu_ok.py");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("this task is broken"), std::string::npos) << v.status().message();
}

// ---- cheats, one or more per attack class of DESIGN.md §5 ----

struct Cheat {
  const char* name;
  const char* candidate;
  Outcome outcome;
  const char* evidence;  // expected in the message or the cheats list
  bool static_checks;
};
void PrintTo(const Cheat& c, std::ostream* os) { *os << c.candidate; }

class CheatTest : public JudgeTest, public ::testing::WithParamInterface<Cheat> {};

TEST_P(CheatTest, IsCaught) {
  const Cheat& c = GetParam();
  std::vector<std::string> overrides;
  if (!c.static_checks) overrides.push_back("judge.static_checks=false");
  Verdict v = MustJudge("relu", c.candidate, overrides);
  EXPECT_EQ(v.outcome, c.outcome) << Describe(v);
  std::string all = v.message;
  for (const auto& x : v.cheats) all += "\n" + x;
  EXPECT_NE(all.find(c.evidence), std::string::npos) << all;
  EXPECT_LE(v.reward, -1);
}

INSTANTIATE_TEST_SUITE_P(
    Attacks, CheatTest,
    ::testing::Values(
        // PyTorch compute instead of a kernel: seen by the linter, or only at run time.
        Cheat{"TorchInForward", "cheats/torch_in_forward.py", Outcome::kForbidden, "torch.relu is PyTorch compute",
              true},
        Cheat{"TensorMethod", "cheats/tensor_method.py", Outcome::kForbidden, "aten::clamp", true},
        Cheat{"AtenFromCpp", "cheats/aten_from_cpp.py", Outcome::kForbidden, "aten::relu", true},
        Cheat{"TryFallback", "cheats/try_fallback.py", Outcome::kForbidden, "try/except", true},
        Cheat{"SubclassModel", "cheats/subclass_model.py", Outcome::kForbidden, "must subclass nn.Module", true},
        // Caching and phase detection: timed calls see fresh inputs and are checked.
        Cheat{"CacheByPointer", "cheats/cache_by_pointer.py", Outcome::kIncorrect, "differ", true},
        Cheat{"PhaseDetect", "cheats/phase_detect.py", Outcome::kIncorrect, "timed calls returned wrong values", true},
        Cheat{"TorchOnlyWhenTimed", "cheats/torch_only_when_timed.py", Outcome::kForbidden, "aten::clamp", true},
        // Lazy outputs, aliasing, in-place changes, lower precision.
        Cheat{"LazySubclass", "cheats/lazy_subclass.py", Outcome::kIncorrect, "not a plain torch.Tensor", true},
        Cheat{"AliasInput", "cheats/alias_input.py", Outcome::kIncorrect, "shares memory with an input", true},
        Cheat{"ModifyInput", "cheats/modify_input.py", Outcome::kIncorrect, "modified in place", true},
        Cheat{"HalfOutput", "cheats/half_output.py", Outcome::kIncorrect, "dtype float16, expected float32", true},
        // Monkeypatching, forged messages, exits: static rules, then run-time integrity.
        Cheat{"PatchTimer", "cheats/patch_timer.py", Outcome::kForbidden, "import of time is not allowed", true},
        Cheat{"PatchHarnessTimer", "unlinted/patch_harness_timer.py", Outcome::kForbidden,
              "cuda_agent_harness.timing._perf_counter", false},
        Cheat{"PatchTorchEqual", "unlinted/patch_torch_equal.py", Outcome::kForbidden, "torch.equal", false},
        Cheat{"OsExit", "unlinted/os_exit.py", Outcome::kRuntimeError, "ended abnormally", false},
        Cheat{"ForgedMessages", "unlinted/forge_messages.py", Outcome::kRuntimeError, "skipped checks", false},
        Cheat{"ReadReference", "unlinted/read_reference.py", Outcome::kRuntimeError, "no reference outputs visible",
              false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(JudgeTest, DeferredWorkOnAnotherThreadIsCaught) {
  Verdict v = MustJudge("relu", "unlinted/deferred_thread.py", {"judge.static_checks=false"});
  EXPECT_TRUE(v.outcome == Outcome::kIncorrect || v.outcome == Outcome::kForbidden) << Describe(v);
}

TEST_F(JudgeTest, FasterThanPhysicsIsForbidden) {
  Verdict v = MustJudge("relu", "cpu/relu_ok.py", {"judge.mem_bandwidth_gbs=0.001"});
  EXPECT_EQ(v.outcome, Outcome::kForbidden) << Describe(v);
  EXPECT_NE(v.message.find("physical limit"), std::string::npos) << v.message;
}

// ---- containment: hostile code with the static checks off ----

TEST_F(JudgeTest, SegfaultIsARuntimeError) {
  Verdict v = MustJudge("relu", "unlinted/segfault.py", {"judge.static_checks=false"});
  EXPECT_EQ(v.outcome, Outcome::kRuntimeError) << Describe(v);
  EXPECT_NE(v.message.find("Segmentation fault"), std::string::npos) << v.message;
}

TEST_F(JudgeTest, InfiniteLoopTimesOut) {
  Verdict v = MustJudge("relu", "unlinted/infinite_loop.py", {"judge.static_checks=false", "judge.run_timeout_s=15"});
  EXPECT_EQ(v.outcome, Outcome::kTimeout) << Describe(v);
}

TEST_F(JudgeTest, ForkBombIsContained) {
  Verdict v = MustJudge("relu", "unlinted/fork_bomb.py", {"judge.static_checks=false", "sandbox.max_processes=128"});
  EXPECT_EQ(v.outcome, Outcome::kRuntimeError) << Describe(v);
  // The judge and the host still work.
  EXPECT_EQ(MustJudge("relu", "cpu/relu_ok.py").outcome, Outcome::kOk);
}

TEST_F(JudgeTest, MemoryBombIsKilled) {
  Verdict v =
      MustJudge("relu", "unlinted/memory_bomb.py", {"judge.static_checks=false", "sandbox.memory_limit_mb=1536"});
  EXPECT_EQ(v.outcome, Outcome::kRuntimeError) << Describe(v);
  EXPECT_NE(v.message.find("memory limit"), std::string::npos) << v.message;
}

TEST_F(JudgeTest, FileSizeBombStops) {
  Verdict v = MustJudge("relu", "unlinted/file_bomb.py", {"judge.static_checks=false", "sandbox.max_file_size_mb=16"});
  EXPECT_EQ(v.outcome, Outcome::kRuntimeError) << Describe(v);
  EXPECT_NE(v.message.find("File too large"), std::string::npos) << v.message;
}

fs::path WriteCandidate(const std::string& name, const std::string& body) {
  fs::path p = fs::temp_directory_path() / ("judge-test-" + name + ".py");
  std::ofstream(p) << "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
                      "        super().__init__()\n\n    def forward(self, x):\n"
                   << body;
  return p;
}

TEST_F(JudgeTest, NetworkIsUnreachable) {
  testing::LoopbackListener listener;
  ASSERT_TRUE(listener.ok());
  fs::path cand = WriteCandidate("network", "        import socket\n        socket.create_connection((\"127.0.0.1\", " +
                                                std::to_string(listener.port()) + "), timeout=3)\n        return x\n");
  Verdict v = MustJudge("relu", cand, {"judge.static_checks=false"});
  EXPECT_EQ(v.outcome, Outcome::kRuntimeError) << Describe(v);
  EXPECT_NE(v.message.find("Operation not permitted"), std::string::npos) << v.message;
  EXPECT_FALSE(listener.Reached()) << "the candidate reached the host";
}

TEST_F(JudgeTest, WritesOutsideTheWorkDirFail) {
  fs::path target = fs::temp_directory_path() / ("judge-escape-" + std::to_string(::getpid()));
  fs::path cand =
      WriteCandidate("write", "        open(\"" + target.string() + "\", \"w\").write(\"x\")\n        return x\n");
  Verdict v = MustJudge("relu", cand, {"judge.static_checks=false"});
  EXPECT_EQ(v.outcome, Outcome::kRuntimeError) << Describe(v);
  EXPECT_NE(v.message.find("Read-only file system"), std::string::npos) << v.message;
  EXPECT_FALSE(fs::exists(target));
}

}  // namespace
}  // namespace cuda_agent::kernel_eval

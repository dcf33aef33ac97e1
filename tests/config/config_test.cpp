#include "cuda_agent/config/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace cuda_agent::config {
namespace {
namespace fs = std::filesystem;

fs::path WriteYaml(const std::string& name, const std::string& text) {
  fs::path p = fs::temp_directory_path() / ("config-test-" + name + ".yaml");
  std::ofstream(p) << text;
  return p;
}

TEST(ConfigTest, DefaultsWithoutAFile) {
  auto c = LoadConfig("", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->judge.num_checks, 5);
  EXPECT_DOUBLE_EQ(c->judge.atol, 1e-2);
  EXPECT_EQ(c->judge.reward, "milestone");
  EXPECT_TRUE(c->sandbox.isolate);
}

// Every shipped config loads; configs/quickstart.yaml is the embedded default, written out.
TEST(ConfigTest, ShippedConfigsLoadAndTheQuickStartIsTheDefault) {
  const fs::path dir = fs::path(CUDA_AGENT_TEST_FIXTURES) / ".." / "configs";
  int loaded = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    auto c = LoadConfig(e.path(), {});
    EXPECT_TRUE(c.ok()) << e.path() << ": " << c.status().ToString();
    ++loaded;
  }
  EXPECT_GE(loaded, 5);
  auto quick = LoadConfig(dir / "quickstart.yaml", {});
  ASSERT_TRUE(quick.ok()) << quick.status().ToString();
  EXPECT_EQ(DumpConfig(*quick), DumpConfig(*LoadConfig("", {})));
}

TEST(ConfigTest, ReadsValuesAndOverrides) {
  fs::path p = WriteYaml("values", "judge:\n  atol: 0.001\n  nvcc_flags: [-O2]\nsandbox:\n  memory_limit_mb: 512\n");
  auto c = LoadConfig(p, {"judge.rtol=0.5", "judge.backend=cpu"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->judge.atol, 0.001);
  EXPECT_DOUBLE_EQ(c->judge.rtol, 0.5);
  EXPECT_EQ(c->judge.backend, "cpu");
  EXPECT_EQ(c->judge.nvcc_flags, std::vector<std::string>{"-O2"});
  EXPECT_EQ(c->sandbox.memory_limit_mb, 512);
}

TEST(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  fs::path p = WriteYaml("unknown", "judge:\n  atol: 0.1\n  speling: 3\n");
  auto c = LoadConfig(p, {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(p.string() + ":3:"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("judge.speling"), std::string::npos);
}

TEST(ConfigTest, WrongTypeAndRangeAreErrors) {
  fs::path p = WriteYaml("type", "judge:\n  num_checks: many\n");
  auto c = LoadConfig(p, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(":2:"), std::string::npos);
  EXPECT_NE(c.status().message().find("judge.num_checks: expected an integer (got 'many')"), std::string::npos)
      << c.status().message();

  auto r = LoadConfig("", {"judge.atol=-1"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("out of range"), std::string::npos);

  auto e = LoadConfig("", {"judge.reward=fastest"});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("not one of: milestone, speedup, kevin"), std::string::npos);

  auto m = LoadConfig("", {"judge=3"});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("expected a map"), std::string::npos);
}

TEST(ConfigTest, SyntaxErrorsAndDuplicatesNameTheLine) {
  fs::path p = WriteYaml("syntax", "judge:\n  atol: [1, 2\n");
  auto c = LoadConfig(p, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("YAML syntax error"), std::string::npos);
  fs::path d = WriteYaml("dup", "judge:\n  atol: 1\n  atol: 2\n");
  auto dup = LoadConfig(d, {});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("duplicate key 'atol'"), std::string::npos);
  EXPECT_EQ(LoadConfig("/nonexistent.yaml", {}).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(LoadConfig("", {"no_equals_sign"}).ok());
}

TEST(ConfigTest, DumpRoundTrips) {
  auto c = LoadConfig("", {"judge.atol=0.25", "judge.cxx_flags=[-O2, -march=native]", "judge.work_dir=/tmp/a b"});
  ASSERT_TRUE(c.ok());
  std::string text = DumpConfig(*c);
  EXPECT_NE(text.find("# absolute tolerance"), std::string::npos);
  fs::path p = WriteYaml("dump", text);
  auto again = LoadConfig(p, {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(DumpConfig(*again), text);
  EXPECT_DOUBLE_EQ(again->judge.atol, 0.25);
  EXPECT_EQ(again->judge.work_dir, "/tmp/a b");
}

}  // namespace
}  // namespace cuda_agent::config

// Parity with transformers: small random Llama / Qwen2 / Qwen3 models saved by
// transformers (tests/model/make_fixtures.py) must give the same fp32 logits
// and greedy tokens here, and a model saved here must load in transformers.
#include "cuda_agent/model/transformer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cuda_agent/model/safetensors.h"
#include "cuda_agent/util/file.h"
#include "cuda_agent/util/hash.h"
#include "model_fixtures.h"

namespace cuda_agent::model {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

fs::path FixtureDir() { return ModelFixtureDir(); }
at::Tensor ReadTensor(const fs::path& file, const std::string& name) { return ReadFixtureTensor(file, name); }

json Greedy(const std::string& arch) { return json::parse(ReadFile(FixtureDir() / arch / "greedy.json").value()); }

at::Tensor Ids(const std::vector<int64_t>& ids) { return at::tensor(ids, at::kLong).view({1, -1}); }

class ParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Transformer> Load() {
    auto m = Transformer::Load(FixtureDir() / GetParam(), {});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(m).value();
  }
};

TEST_P(ParityTest, Fp32LogitsMatchTransformers) {
  auto model = Load();
  auto prompts = Greedy(GetParam())["prompts"].get<std::vector<std::vector<int64_t>>>();
  for (size_t i = 0; i < prompts.size(); ++i) {
    at::Tensor ids = Ids(prompts[i]);
    at::Tensor logits = model->Forward(ids, at::arange(ids.size(1), at::kLong).view({1, -1}))[0];
    at::Tensor expected = ReadTensor(FixtureDir() / GetParam() / "expected.safetensors", "logits_" + std::to_string(i));
    double diff = (logits - expected).abs().max().item<double>();
    EXPECT_LT(diff, 1e-4) << GetParam() << " prompt " << i;
  }
}

TEST_P(ParityTest, RightPaddedBatchesMatchSingleRows) {
  auto model = Load();
  auto prompts = Greedy(GetParam())["prompts"].get<std::vector<std::vector<int64_t>>>();
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  at::Tensor ids = at::zeros({static_cast<int64_t>(prompts.size()), longest}, at::kLong);
  for (size_t i = 0; i < prompts.size(); ++i)
    ids[static_cast<int64_t>(i)].narrow(0, 0, static_cast<int64_t>(prompts[i].size())).copy_(at::tensor(prompts[i]));
  at::Tensor positions = at::arange(longest, at::kLong).expand({ids.size(0), longest}).contiguous();
  at::Tensor logits = model->Forward(ids, positions);
  for (size_t i = 0; i < prompts.size(); ++i) {
    int64_t n = static_cast<int64_t>(prompts[i].size());
    at::Tensor expected = ReadTensor(FixtureDir() / GetParam() / "expected.safetensors", "logits_" + std::to_string(i));
    EXPECT_LT((logits[static_cast<int64_t>(i)].narrow(0, 0, n) - expected).abs().max().item<double>(), 1e-4);
  }
}

TEST_P(ParityTest, GreedyDecodingWithTheKvCacheIsTokenIdentical) {
  auto model = Load();
  json g = Greedy(GetParam());
  auto prompts = g["prompts"].get<std::vector<std::vector<int64_t>>>();
  auto expected = g["continuations"].get<std::vector<std::vector<int64_t>>>();
  KvCache cache = KvCache::Allocate(model->config(), 4, 64, at::kFloat, at::kCPU);
  for (size_t i = 0; i < prompts.size(); ++i) {
    at::Tensor slot = at::tensor({static_cast<int64_t>(i + 1)}, at::kLong);  // any slot works
    at::Tensor ids = Ids(prompts[i]);
    int64_t n = ids.size(1);
    at::Tensor logits = model->Forward(ids, at::arange(n, at::kLong).view({1, -1}), &cache, slot);
    std::vector<int64_t> out;
    for (size_t t = 0; t < expected[i].size(); ++t) {
      int64_t next = logits[0][-1].argmax().item<int64_t>();
      out.push_back(next);
      logits =
          model->Forward(Ids({next}), at::tensor({n + static_cast<int64_t>(t)}, at::kLong).view({1, 1}), &cache, slot);
    }
    EXPECT_EQ(out, expected[i]) << GetParam() << " prompt " << i;
  }
}

TEST_P(ParityTest, SavedModelsLoadInTransformersWithTheSameLogits) {
  auto model = Load();
  fs::path out = fs::temp_directory_path() / ("exported-" + GetParam() + "-" + std::to_string(::getpid()));
  ASSERT_TRUE(model->Save(out).ok());
  fs::path logits = out / "logits.safetensors";
  std::string cmd =
      "python3 " + ModelFixtureScript().string() + " --logits " + out.string() + " " + logits.string() + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "transformers could not load the export";
  for (int i = 0; i < 3; ++i) {
    std::string name = "logits_" + std::to_string(i);
    at::Tensor ours = ReadTensor(logits, name);
    at::Tensor expected = ReadTensor(FixtureDir() / GetParam() / "expected.safetensors", name);
    EXPECT_LT((ours - expected).abs().max().item<double>(), 1e-4) << name;
  }
  auto again = Transformer::Load(out, {});  // and here
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Architectures, ParityTest, ::testing::Values("llama", "qwen2", "qwen3"));

// A copy of a fixture model to break.
fs::path Copy(const std::string& arch, const std::string& tag) {
  fs::path dst = fs::temp_directory_path() / ("broken-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::copy(FixtureDir() / arch, dst, fs::copy_options::recursive);
  return dst;
}

void EditConfig(const fs::path& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(ReadFile(dir / "config.json").value());
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
}

TEST(ModelLoadTest, BadCheckpointsNameTheFileAndTensor) {
  fs::path d = Copy("qwen3", "missing");
  fs::remove(d / "model.safetensors");
  auto r = Transformer::Load(d, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.safetensors"), std::string::npos) << r.status().message();

  d = Copy("qwen3", "corrupt");
  fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") / 2);
  r = Transformer::Load(d, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.safetensors"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("past the file end"), std::string::npos) << r.status().message();

  d = Copy("llama", "shape");
  EditConfig(d, [](json& j) { j["intermediate_size"] = 97; });
  r = Transformer::Load(d, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("[96, 64]"), std::string::npos) << r.status().message();

  d = Copy("llama", "arch");
  EditConfig(d, [](json& j) { j["model_type"] = "gpt_neox"; });
  r = Transformer::Load(d, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json: model_type"), std::string::npos) << r.status().message();

  d = Copy("qwen2", "shard");  // a shard named by the index is gone
  fs::remove(d / "model-00002-of-00004.safetensors");
  r = Transformer::Load(d, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model-00002-of-00004.safetensors"), std::string::npos) << r.status().message();
  for (const char* tag : {"missing", "corrupt", "shape", "arch", "shard"})
    fs::remove_all(fs::temp_directory_path() / (std::string("broken-") + tag + "-" + std::to_string(::getpid())));
}

// transformers >= 5 writes rope_theta and rope_scaling as one rope_parameters
// object, or one per layer type; either must give the same model.
TEST(ModelLoadTest, RopeParametersOfNewerTransformersLoadAlike) {
  for (bool per_layer_type : {false, true}) {
    fs::path d = Copy("llama", per_layer_type ? "rope-per-type" : "rope");
    EditConfig(d, [&](json& j) {
      json params = j.value("rope_parameters", j.value("rope_scaling", json::object()));
      params["rope_theta"] = params.value("rope_theta", j.value("rope_theta", 10000.0));
      params["rope_type"] = params.value("rope_type", params.value("type", std::string("default")));
      j.erase("rope_scaling");
      j.erase("rope_theta");
      j["rope_parameters"] = per_layer_type ? json{{"full_attention", params}} : params;
    });
    auto model = Transformer::Load(d, {});
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    at::Tensor ids = Ids(Greedy("llama")["prompts"][0].get<std::vector<int64_t>>());
    at::Tensor logits = (*model)->Forward(ids, at::arange(ids.size(1), at::kLong).view({1, -1}))[0];
    at::Tensor expected = ReadTensor(FixtureDir() / "llama" / "expected.safetensors", "logits_0");
    EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-4) << "per layer type: " << per_layer_type;
    fs::remove_all(d);
  }
}

TEST(ModelLoadTest, Bf16WeightsLoadAndRun) {
  auto model = Transformer::Load(FixtureDir() / "qwen2", {at::kBFloat16, at::kCPU, /*value_head=*/true});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  at::Tensor values;
  at::Tensor logits = (*model)->Forward(Ids({1, 2, 3}), at::arange(3, at::kLong).view({1, 3}), nullptr, {}, &values);
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  EXPECT_EQ(values.sizes(), (std::vector<int64_t>{1, 3}));
  at::Tensor expected = ReadTensor(FixtureDir() / "qwen2" / "expected.safetensors", "logits_0");
  EXPECT_EQ(logits.size(2), expected.size(1));
}

}  // namespace
}  // namespace cuda_agent::model

// Small random Llama / Qwen2 / Qwen3 models and their transformers outputs,
// made by make_fixtures.py once per version of the script (in the build
// tree's test cache), shared by the model tests.
#pragma once

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cuda_agent/model/safetensors.h"
#include "cuda_agent/util/file.h"
#include "cuda_agent/util/hash.h"

namespace cuda_agent::model {

inline const std::filesystem::path& ModelFixtureScript() {
  static const auto path = std::filesystem::path(CUDA_AGENT_TEST_FIXTURES) / "model" / "make_fixtures.py";
  return path;
}

inline std::filesystem::path ModelFixtureDir() {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    fs::path d = fs::path(CUDA_AGENT_TEST_CACHE) /
                 ("models-" + Sha256Hex(ReadFile(ModelFixtureScript()).value()).substr(0, 12));
    if (fs::exists(d)) return d;
    fs::path tmp = d.string() + ".tmp" + std::to_string(::getpid());
    std::string cmd = "python3 " + ModelFixtureScript().string() + " " + tmp.string() + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) std::abort();  // make_fixtures.py failed: is transformers installed?
    std::error_code ec;
    fs::rename(tmp, d, ec);  // another test process may have won the race
    if (ec) fs::remove_all(tmp, ec);
    return d;
  }();
  return dir;
}

inline at::Tensor ReadFixtureTensor(const std::filesystem::path& file, const std::string& name) {
  auto reader = SafetensorsReader::Open(file).value();
  TensorView v = reader->Get(name).value();
  return at::from_blob(const_cast<void*>(v.data), v.shape, at::kFloat).clone();
}

}  // namespace cuda_agent::model

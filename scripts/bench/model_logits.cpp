// Logits of a checkpoint on given prompts, for parity checks against
// transformers (scripts/bench/bf16_parity.py).
//
//   model_logits --model DIR --prompts prompts.json --out logits.safetensors --device cuda --dtype bfloat16
//
// prompts.json: [[token ids], ...]; the output holds logits_<i> as float32 (T, V).
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>

#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cuda_agent/model/safetensors.h"
#include "cuda_agent/model/transformer.h"
#include "cuda_agent/util/file.h"

using namespace cuda_agent;

int main(int argc, char** argv) {
  CLI::App app{"logits of a checkpoint"};
  std::string model_dir, prompts_path, out, device = "cpu", dtype = "float32";
  app.add_option("--model", model_dir)->required();
  app.add_option("--prompts", prompts_path)->required();
  app.add_option("--out", out)->required();
  app.add_option("--device", device);
  app.add_option("--dtype", dtype);
  CLI11_PARSE(app, argc, argv);
  model::LoadOptions lo{dtype == "bfloat16" ? at::kBFloat16 : at::kFloat, c10::Device(device), false};
  auto model = model::Transformer::Load(model_dir, lo);
  if (!model.ok()) return std::cerr << model.status().ToString() << "\n", 1;
  auto text = ReadFile(prompts_path);
  if (!text.ok()) return std::cerr << text.status().ToString() << "\n", 1;
  auto prompts = nlohmann::json::parse(*text).get<std::vector<std::vector<int64_t>>>();
  c10::InferenceMode guard;
  std::vector<model::TensorBytes> tensors;
  for (size_t i = 0; i < prompts.size(); ++i) {
    at::Tensor ids = at::tensor(prompts[i], at::kLong).view({1, -1}).to(lo.device);
    at::Tensor positions = at::arange(ids.size(1), ids.options()).view({1, -1});
    at::Tensor logits = (*model)->Forward(ids, positions)[0].to(at::kCPU, at::kFloat).contiguous();
    tensors.push_back({"logits_" + std::to_string(i), "F32", logits.sizes().vec(),
                       std::string(static_cast<const char*>(logits.data_ptr()), logits.nbytes())});
  }
  Status s = model::WriteSafetensors(out, tensors);
  if (!s.ok()) return std::cerr << s.ToString() << "\n", 1;
  return 0;
}

// A decoder-only LM's shape, read from a Hugging Face config.json: Llama,
// Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm, explicit head_dim). Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_agent/util/status.h"

namespace cuda_agent::model {

enum class Architecture { kLlama, kQwen2, kQwen3 };

struct RopeScaling {
  std::string type = "default";  // default, linear, llama3
  double factor = 1;
  double low_freq_factor = 1, high_freq_factor = 4;     // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;  // "llama", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o for Llama's attention_bias) biases
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;         // Qwen3
  std::string torch_dtype = "float32";
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  nlohmann::json raw;  // the file as read, written back on export

  // Parameters of the trunk + head (embedding counted once when tied).
  int64_t ParameterCount() const;
};

// Reads `dir`/config.json; errors name the file and the key.
StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir);
// Builds a config from JSON already in memory (`where` names it in errors).
StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& j, const std::string& where);

}  // namespace cuda_agent::model

#include "cuda_agent/model/model_config.h"

#include "cuda_agent/util/file.h"

namespace cuda_agent::model {
using nlohmann::json;

int64_t ModelConfig::ParameterCount() const {
  int64_t h = hidden_size, q = num_heads * head_dim, kv = num_kv_heads * head_dim;
  int64_t attn = h * q + 2 * h * kv + q * h + (attention_bias ? q + 2 * kv : 0) + (qk_norm ? 2 * head_dim : 0);
  int64_t mlp = 3 * h * intermediate_size;
  int64_t layer = attn + mlp + 2 * h;
  return num_layers * layer + vocab_size * h * (tie_word_embeddings ? 1 : 2) + h;
}

StatusOr<ModelConfig> ParseModelConfig(const json& j, const std::string& where) {
  auto fail = [&](const std::string& key, const std::string& why) -> Status {
    return InvalidArgument(where + ": " + key + ": " + why);
  };
  if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
  ModelConfig c;
  c.raw = j;
  c.model_type = j.value("model_type", "");
  if (c.model_type == "llama" || c.model_type == "mistral") {
    c.architecture = Architecture::kLlama;
  } else if (c.model_type == "qwen2") {
    c.architecture = Architecture::kQwen2;
  } else if (c.model_type == "qwen3") {
    c.architecture = Architecture::kQwen3;
  } else {
    return fail("model_type", "'" + c.model_type + "' is not a supported architecture (llama, qwen2, qwen3)");
  }
  auto integer = [&](const char* key, int64_t* out, bool required) -> Status {
    if (!j.contains(key) || j[key].is_null()) return required ? fail(key, "missing") : Status::Ok();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0) return fail(key, "not a positive integer");
    *out = j[key].get<int64_t>();
    return Status::Ok();
  };
  CA_RETURN_IF_ERROR(integer("vocab_size", &c.vocab_size, true));
  CA_RETURN_IF_ERROR(integer("hidden_size", &c.hidden_size, true));
  CA_RETURN_IF_ERROR(integer("intermediate_size", &c.intermediate_size, true));
  CA_RETURN_IF_ERROR(integer("num_hidden_layers", &c.num_layers, true));
  CA_RETURN_IF_ERROR(integer("num_attention_heads", &c.num_heads, true));
  c.num_kv_heads = c.num_heads;
  CA_RETURN_IF_ERROR(integer("num_key_value_heads", &c.num_kv_heads, false));
  c.head_dim = c.hidden_size / c.num_heads;
  CA_RETURN_IF_ERROR(integer("head_dim", &c.head_dim, false));
  c.max_position_embeddings = 4096;
  CA_RETURN_IF_ERROR(integer("max_position_embeddings", &c.max_position_embeddings, false));
  if (c.num_heads % c.num_kv_heads != 0) return fail("num_key_value_heads", "does not divide num_attention_heads");
  if (c.head_dim % 2 != 0) return fail("head_dim", "must be even for rotary embeddings");
  std::string act = j.value("hidden_act", "silu");
  if (act != "silu") return fail("hidden_act", "'" + act + "' is not supported (silu)");
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
  c.rope_theta = j.value("rope_theta", 10000.0);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  c.torch_dtype = j.value("torch_dtype", j.value("dtype", std::string("float32")));
  if (c.architecture == Architecture::kLlama) {
    c.attention_bias = c.o_bias = j.value("attention_bias", false);
    c.mlp_bias = j.value("mlp_bias", false);
  } else if (c.architecture == Architecture::kQwen2) {
    c.attention_bias = true;
  } else {
    c.attention_bias = j.value("attention_bias", false);
    c.qk_norm = true;
  }
  if (j.value("use_sliding_window", false))
    return fail("use_sliding_window", "sliding-window attention is not supported");
  // transformers >= 5 writes rope_theta and the scaling into one
  // rope_parameters object (or one per layer type); older versions write
  // rope_theta and rope_scaling at the top level.
  json rs = j.value("rope_scaling", json());
  const json& rp = j.value("rope_parameters", json());
  if (rp.is_object() && !rp.empty()) {
    json params = rp;
    if (!rp.contains("rope_theta") && !rp.contains("rope_type") && !rp.contains("type")) {  // per layer type
      params = rp.begin().value();
      for (const auto& [layer_type, p] : rp.items())
        if (p != params) return fail("rope_parameters", "layer types with different rotary settings are not supported");
    }
    if (!params.is_object()) return fail("rope_parameters", "not an object");
    c.rope_theta = params.value("rope_theta", c.rope_theta);
    rs = params;
  } else if (!rp.is_null() && !rp.is_object()) {
    return fail("rope_parameters", "not an object");
  }
  if (!rs.is_null()) {
    std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
    c.rope_scaling.type = type;
    c.rope_scaling.factor = rs.value("factor", 1.0);
    if (type == "llama3") {
      c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0);
      c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0);
      c.rope_scaling.original_max_position_embeddings = rs.value("original_max_position_embeddings", int64_t{8192});
    } else if (type != "default" && type != "linear") {
      return fail("rope_scaling.rope_type", "'" + type + "' is not supported (default, linear, llama3)");
    }
  }
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"];
  const json& eos = j.value("eos_token_id", json());
  if (eos.is_number_integer()) c.eos_token_ids.push_back(eos.get<int64_t>());
  if (eos.is_array())
    for (const auto& e : eos) c.eos_token_ids.push_back(e.get<int64_t>());
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& dir) {
  auto path = dir / "config.json";
  CA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(path.string() + ": not valid JSON");
  return ParseModelConfig(j, path.string());
}

}  // namespace cuda_agent::model

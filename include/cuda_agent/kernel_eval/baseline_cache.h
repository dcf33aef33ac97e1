// torch.compile baseline timings persisted on disk, keyed by task, device,
// torch version and timing settings, so a baseline is compiled and timed once.
// Safe to share between processes: entries are written atomically.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace cuda_agent::kernel_eval {

class BaselineCache {
 public:
  explicit BaselineCache(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::optional<nlohmann::json> Get(const std::string& key) const;
  void Put(const std::string& key, const nlohmann::json& value) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace cuda_agent::kernel_eval

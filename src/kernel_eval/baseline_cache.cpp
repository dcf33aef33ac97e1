#include "cuda_agent/kernel_eval/baseline_cache.h"

#include "cuda_agent/util/file.h"
#include "cuda_agent/util/log.h"

namespace cuda_agent::kernel_eval {

std::optional<nlohmann::json> BaselineCache::Get(const std::string& key) const {
  auto text = ReadFile(dir_ / (key + ".json"));
  if (!text.ok()) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

void BaselineCache::Put(const std::string& key, const nlohmann::json& value) const {
  Status s = MakeDirs(dir_);
  if (s.ok()) s = WriteFileAtomic(dir_ / (key + ".json"), value.dump(2));
  if (!s.ok()) {
    CA_LOG(kWarn) << "baseline cache: " << s.ToString();
  }
}

}  // namespace cuda_agent::kernel_eval

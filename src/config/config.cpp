#include "cuda_agent/config/config.h"

namespace cuda_agent::config {

StatusOr<Config> LoadConfig(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  ConfigNode root;
  if (!path.empty()) {
    CA_ASSIGN_OR_RETURN(root, ParseYamlFile(path));
  }
  for (const auto& assignment : overrides) CA_RETURN_IF_ERROR(ApplyOverride(&root, assignment));
  Config config;
  CA_RETURN_IF_ERROR(ReadStruct(root, &config));
  return config;
}

std::string DumpConfig(Config config) { return DumpStruct(config); }

}  // namespace cuda_agent::config

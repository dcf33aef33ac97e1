// A parsed YAML document as a plain tree that remembers where each value came
// from (file, line, column), so every config error can name its origin. The
// YAML library stays private to the config component.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::config {

struct ConfigNode {
  enum class Kind { kNull, kScalar, kMap, kSeq };
  Kind kind = Kind::kNull;
  std::string scalar;                                   // kScalar
  std::vector<std::pair<std::string, ConfigNode>> map;  // kMap, in file order
  std::vector<ConfigNode> seq;                          // kSeq
  std::string file;                                     // origin, for messages
  int line = 0;                                         // 1-based; 0 when synthetic
  int column = 0;

  // "configs/a.yaml:12:3" or "--set judge.atol" for overrides.
  std::string Where() const;
  const ConfigNode* Find(const std::string& key) const;
  ConfigNode* FindOrAdd(const std::string& key);
};

StatusOr<ConfigNode> ParseYamlFile(const std::filesystem::path& path);
// `origin` names the text in messages (a file name or "<embedded>").
StatusOr<ConfigNode> ParseYamlString(const std::string& text, const std::string& origin);

// Applies one "a.b.c=value" override: `value` is parsed as YAML (so "[1,2]" is a
// list), and replaces or creates the node at that dotted path.
Status ApplyOverride(ConfigNode* root, const std::string& assignment);

}  // namespace cuda_agent::config

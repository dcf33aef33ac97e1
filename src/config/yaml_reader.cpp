#include <yaml-cpp/yaml.h>

#include "cuda_agent/config/config_node.h"
#include "cuda_agent/util/file.h"

namespace cuda_agent::config {
namespace {

ConfigNode Convert(const YAML::Node& node, const std::string& file) {
  ConfigNode out;
  out.file = file;
  out.line = node.Mark().line + 1;
  out.column = node.Mark().column + 1;
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      out.kind = ConfigNode::Kind::kScalar;
      out.scalar = node.Scalar();
      break;
    case YAML::NodeType::Sequence:
      out.kind = ConfigNode::Kind::kSeq;
      for (const auto& item : node) out.seq.push_back(Convert(item, file));
      break;
    case YAML::NodeType::Map:
      out.kind = ConfigNode::Kind::kMap;
      for (const auto& kv : node) out.map.emplace_back(kv.first.as<std::string>(), Convert(kv.second, file));
      break;
    default:
      out.kind = ConfigNode::Kind::kNull;
  }
  return out;
}

}  // namespace

std::string ConfigNode::Where() const {
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

const ConfigNode* ConfigNode::Find(const std::string& key) const {
  for (const auto& [k, v] : map)
    if (k == key) return &v;
  return nullptr;
}

ConfigNode* ConfigNode::FindOrAdd(const std::string& key) {
  for (auto& [k, v] : map)
    if (k == key) return &v;
  map.emplace_back(key, ConfigNode{});
  return &map.back().second;
}

StatusOr<ConfigNode> ParseYamlString(const std::string& text, const std::string& origin) {
  try {
    YAML::Node root = YAML::Load(text);
    // Duplicate keys are silently merged by yaml-cpp; catch them here.
    ConfigNode node = Convert(root, origin);
    std::vector<const ConfigNode*> stack{&node};
    while (!stack.empty()) {
      const ConfigNode* n = stack.back();
      stack.pop_back();
      for (size_t i = 0; i < n->map.size(); ++i) {
        for (size_t j = 0; j < i; ++j)
          if (n->map[i].first == n->map[j].first)
            return InvalidArgument(n->map[i].second.Where() + ": duplicate key '" + n->map[i].first + "'");
        stack.push_back(&n->map[i].second);
      }
      for (const auto& item : n->seq) stack.push_back(&item);
    }
    return node;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                           ": YAML syntax error: " + e.msg);
  }
}

StatusOr<ConfigNode> ParseYamlFile(const std::filesystem::path& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return NotFound("config file " + path.string() + " cannot be read");
  return ParseYamlString(*text, path.string());
}

Status ApplyOverride(ConfigNode* root, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) return InvalidArgument("--set '" + assignment + "': expected key.path=value");
  std::string path = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  auto parsed = ParseYamlString(value, "--set " + path);
  if (!parsed.ok()) return parsed.status();
  if (root->kind == ConfigNode::Kind::kNull) root->kind = ConfigNode::Kind::kMap;
  ConfigNode* node = root;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) return InvalidArgument("--set '" + assignment + "': empty key in path");
    if (node->kind == ConfigNode::Kind::kNull) node->kind = ConfigNode::Kind::kMap;
    if (node->kind != ConfigNode::Kind::kMap)
      return InvalidArgument("--set '" + assignment + "': '" + key + "' is inside a value that is not a map");
    node = node->FindOrAdd(key);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  *node = std::move(parsed).value();
  node->file = "--set " + path;
  node->line = 0;
  return Status::Ok();
}

}  // namespace cuda_agent::config

// Typed config structs are plain structs with a `Visit` method that lists every
// field with its YAML key, a comment and, for numbers, a range:
//
//   struct Foo {
//     double timeout_s = 30;  // wall-clock limit
//     template <class V> void Visit(V& v) {
//       v("timeout_s", timeout_s, "wall-clock limit of one call, seconds", Range{0.1, 3600});
//     }
//   };
//
// FieldReader fills a struct from a ConfigNode (unknown keys, wrong types and
// out-of-range values are errors naming file, line and key); FieldWriter dumps it
// back as commented YAML.
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_agent/config/config_node.h"

namespace cuda_agent::config {

struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
};

// The allowed values of a string field.
struct OneOf {
  std::vector<std::string> values;
};

template <typename T, typename = void>
struct IsVisitable : std::false_type {};
template <typename T>
struct IsVisitable<T, std::void_t<decltype(std::declval<T&>().template Visit<int>(std::declval<int&>()))>>
    : std::true_type {};

// Scalar conversions; each returns an empty string on success or the reason.
std::string ParseScalar(const std::string& text, bool* out);
std::string ParseScalar(const std::string& text, int64_t* out);
std::string ParseScalar(const std::string& text, int* out);
std::string ParseScalar(const std::string& text, double* out);
std::string ParseScalar(const std::string& text, std::string* out);
std::string FormatScalar(bool v);
std::string FormatScalar(int64_t v);
std::string FormatScalar(int v);
std::string FormatScalar(double v);
std::string FormatScalar(const std::string& v);

class FieldReader {
 public:
  // `node` must be a map (or null: all defaults). `prefix` is the dotted path of
  // `node` ("judge."), used in messages.
  FieldReader(const ConfigNode& node, std::string prefix);

  template <typename T>
  void operator()(const char* key, T& field, const char* doc) {
    Read(key, field, nullptr, nullptr);
  }
  template <typename T>
  void operator()(const char* key, T& field, const char* doc, Range range) {
    Read(key, field, &range, nullptr);
  }
  void operator()(const char* key, std::string& field, const char* doc, const OneOf& one_of) {
    Read(key, field, nullptr, &one_of);
  }

  // Call after Visit: reports keys that no field claimed.
  Status Finish();
  const Status& status() const { return status_; }

 private:
  template <typename T>
  void Read(const char* key, T& field, const Range* range, const OneOf* one_of) {
    if (!status_.ok()) return;
    seen_.insert(key);
    const ConfigNode* child = node_.kind == ConfigNode::Kind::kMap ? node_.Find(key) : nullptr;
    if (child == nullptr) return;
    std::string full = prefix_ + key;
    if constexpr (IsVisitable<T>::value) {
      if (child->kind == ConfigNode::Kind::kNull) return;
      if (child->kind != ConfigNode::Kind::kMap) return Fail(*child, full, "expected a map");
      FieldReader sub(*child, full + ".");
      field.Visit(sub);
      status_ = sub.Finish();
    } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<int64_t>> ||
                         std::is_same_v<T, std::vector<double>>) {
      if (child->kind != ConfigNode::Kind::kSeq) return Fail(*child, full, "expected a list");
      T values;
      for (const auto& item : child->seq) {
        typename T::value_type v{};
        if (item.kind != ConfigNode::Kind::kScalar) return Fail(item, full, "expected a scalar list item");
        std::string err = ParseScalar(item.scalar, &v);
        if (!err.empty()) return Fail(item, full, err + " (got '" + item.scalar + "')");
        values.push_back(v);
      }
      field = std::move(values);
    } else {
      if (child->kind != ConfigNode::Kind::kScalar) return Fail(*child, full, "expected a scalar");
      T v{};
      std::string err = ParseScalar(child->scalar, &v);
      if (!err.empty()) return Fail(*child, full, err + " (got '" + child->scalar + "')");
      if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
        if (range != nullptr && (static_cast<double>(v) < range->min || static_cast<double>(v) > range->max)) {
          std::ostringstream msg;
          msg << "value " << child->scalar << " is out of range [" << range->min << ", " << range->max << "]";
          return Fail(*child, full, msg.str());
        }
      }
      if constexpr (std::is_same_v<T, std::string>) {
        if (one_of != nullptr) {
          bool ok = false;
          std::string allowed;
          for (const auto& a : one_of->values) {
            ok |= (a == v);
            allowed += (allowed.empty() ? "" : ", ") + a;
          }
          if (!ok) return Fail(*child, full, "value '" + v + "' is not one of: " + allowed);
        }
      }
      field = v;
    }
  }
  void Fail(const ConfigNode& at, const std::string& key, const std::string& why);

  const ConfigNode& node_;
  std::string prefix_;
  std::set<std::string> seen_;
  Status status_;
};

class FieldWriter {
 public:
  explicit FieldWriter(int indent = 0) : indent_(indent) {}

  template <typename T>
  void operator()(const char* key, T& field, const char* doc) {
    Write(key, field, doc);
  }
  template <typename T, typename Extra>
  void operator()(const char* key, T& field, const char* doc, const Extra&) {
    Write(key, field, doc);
  }
  std::string str() const { return out_.str(); }

 private:
  template <typename T>
  void Write(const char* key, T& field, const char* doc) {
    std::string pad(static_cast<size_t>(indent_), ' ');
    out_ << pad << "# " << doc << "\n";
    if constexpr (IsVisitable<T>::value) {
      out_ << pad << key << ":\n";
      FieldWriter sub(indent_ + 2);
      field.Visit(sub);
      out_ << sub.str();
    } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<int64_t>> ||
                         std::is_same_v<T, std::vector<double>>) {
      out_ << pad << key << ": [";
      for (size_t i = 0; i < field.size(); ++i) out_ << (i ? ", " : "") << FormatScalar(field[i]);
      out_ << "]\n";
    } else {
      out_ << pad << key << ": " << FormatScalar(field) << "\n";
    }
  }
  int indent_;
  std::ostringstream out_;
};

// Fills `out` from `root` (a map, or null for all defaults).
template <typename T>
Status ReadStruct(const ConfigNode& root, T* out) {
  if (root.kind != ConfigNode::Kind::kMap && root.kind != ConfigNode::Kind::kNull)
    return InvalidArgument(root.Where() + ": the config must be a map of sections");
  FieldReader reader(root, "");
  out->Visit(reader);
  return reader.Finish();
}

template <typename T>
std::string DumpStruct(T& value) {
  FieldWriter writer;
  value.Visit(writer);
  return writer.str();
}

}  // namespace cuda_agent::config

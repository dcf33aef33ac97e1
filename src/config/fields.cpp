#include "cuda_agent/config/fields.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace cuda_agent::config {

std::string ParseScalar(const std::string& text, bool* out) {
  if (text == "true")
    *out = true;
  else if (text == "false")
    *out = false;
  else
    return "expected true or false";
  return "";
}

std::string ParseScalar(const std::string& text, int64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec != std::errc() || ptr != text.data() + text.size()) return "expected an integer";
  return "";
}

std::string ParseScalar(const std::string& text, int* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec != std::errc() || ptr != text.data() + text.size()) return "expected an integer";
  return "";
}

std::string ParseScalar(const std::string& text, double* out) {
  if (text.empty()) return "expected a number";
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(*out)) return "expected a finite number";
  return "";
}

std::string ParseScalar(const std::string& text, std::string* out) {
  *out = text;
  return "";
}

std::string FormatScalar(bool v) { return v ? "true" : "false"; }
std::string FormatScalar(int64_t v) { return std::to_string(v); }
std::string FormatScalar(int v) { return std::to_string(v); }
std::string FormatScalar(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  std::string out = s.str();
  if (out.find_first_of(".eEn") == std::string::npos) out += ".0";
  return out;
}
std::string FormatScalar(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

FieldReader::FieldReader(const ConfigNode& node, std::string prefix) : node_(node), prefix_(std::move(prefix)) {}

void FieldReader::Fail(const ConfigNode& at, const std::string& key, const std::string& why) {
  status_ = InvalidArgument(at.Where() + ": " + key + ": " + why);
}

Status FieldReader::Finish() {
  if (!status_.ok()) return status_;
  for (const auto& [key, child] : node_.map) {
    if (seen_.count(key) == 0) {
      std::string known;
      for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
      return InvalidArgument(child.Where() + ": unknown key '" + prefix_ + key + "' (known here: " + known + ")");
    }
  }
  return Status::Ok();
}

}  // namespace cuda_agent::config

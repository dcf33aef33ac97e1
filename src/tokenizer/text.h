// Text helpers of the tokenizer: UTF-8, GPT-2's byte-to-character map and a
// PCRE2 regex with Unicode properties. Internal to the tokenizer component.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::tokenizer {

// The UTF-8 encoding of code point `cp`.
std::string Utf8(uint32_t cp);

// Length of the valid UTF-8 character at `p` (n bytes left), or 0 if invalid;
// `*maximal` is then the length of its longest valid prefix (at least 1).
size_t ValidCharLength(const unsigned char* p, size_t n, size_t* maximal);

// `text` with each maximal invalid UTF-8 subsequence replaced by one U+FFFD
// (the rule of Rust's from_utf8_lossy, which Hugging Face's decode uses).
std::string ValidUtf8(std::string_view text);

// Bytes in the character that starts with `lead` (1 for a stray byte).
size_t CharLength(unsigned char lead);

// GPT-2's map of the 256 byte values onto printable characters.
struct ByteMap {
  std::array<std::string, 256> to_char;
  std::unordered_map<std::string, uint8_t> to_byte;
  ByteMap();
};
const ByteMap& Bytes();

// A compiled PCRE2 pattern with Unicode properties; shared by threads.
class Regex {
 public:
  static StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex();
  // [begin, end) byte ranges of the non-empty matches, left to right.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

 private:
  explicit Regex(pcre2_code* code) : code_(code) {}
  pcre2_code* code_;
};

}  // namespace cuda_agent::tokenizer

#include "text.h"

#include <algorithm>

namespace cuda_agent::tokenizer {

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

size_t ValidCharLength(const unsigned char* p, size_t n, size_t* maximal) {
  unsigned char c = p[0];
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4)
    len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  *maximal = 1;
  if (len == 0) return 0;
  for (size_t i = 1; i < len; ++i) {
    if (i >= n) return 0;
    unsigned char b = p[i];
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    *maximal = i + 1;
  }
  return len;
}

std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0, n = text.size();
  while (i < n) {
    size_t maximal = 1;
    size_t len = ValidCharLength(p + i, n - i, &maximal);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  return out;
}

size_t CharLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

ByteMap::ByteMap() {
  std::vector<int> printable;
  for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    bool kept = std::find(printable.begin(), printable.end(), b) != printable.end();
    to_char[b] = Utf8(kept ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++));
    to_byte[to_char[b]] = static_cast<uint8_t>(b);
  }
}

const ByteMap& Bytes() {
  static const ByteMap map;
  return map;
}

StatusOr<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("regex /" + pattern + "/ at offset " + std::to_string(offset) + ": " +
                           reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  return std::unique_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  size_t offset = 0;
  while (offset < text.size()) {
    int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), offset, PCRE2_NO_UTF_CHECK, md,
                         nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // an empty match: step over one character
      offset = ov[0] + CharLength(static_cast<unsigned char>(text[ov[0]]));
      continue;
    }
    out.emplace_back(ov[0], ov[1]);
    offset = ov[1];
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace cuda_agent::tokenizer

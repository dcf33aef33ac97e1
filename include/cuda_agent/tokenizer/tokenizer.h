// Hugging Face byte-level BPE tokenizers (GPT-2, Qwen2, Llama-3 style), read
// from `tokenizer.json`, encoding and decoding exactly as the `tokenizers`
// library does for the features those files use:
//
//   added tokens (leftmost-longest match on the raw text; lstrip/rstrip)
//   -> normalizer (NFC, or none)
//   -> pre-tokenizer (Split by regex, PCRE2 with Unicode properties; ByteLevel,
//      with or without the GPT-2 regex and prefix space)
//   -> BPE with merge ranks (ignore_merges as in Llama-3)
//   -> post-processor (ByteLevel, TemplateProcessing for BOS/EOS) when asked.
//
// Anything else in the file (WordPiece, Metaspace, other normalizers) is refused
// at load time with the file and the JSON key. Thread-safe after Load().
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_agent/util/status.h"

namespace cuda_agent::tokenizer {

class Tokenizer {
 public:
  // `path`: a tokenizer.json, or a directory holding one.
  static StatusOr<std::shared_ptr<const Tokenizer>> Load(const std::filesystem::path& path);
  ~Tokenizer();

  // `add_special_tokens`: apply the post-processor's template (e.g. Llama-3's BOS).
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = false) const;
  // Invalid UTF-8 (a partial character at a cut) becomes U+FFFD, as in Hugging Face.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // -1 if `token` is not in the vocabulary or the added tokens.
  int32_t TokenId(std::string_view token) const;
  // The token string of `id` ("" if out of range).
  const std::string& Token(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // One past the largest id.
  int32_t vocab_size() const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda_agent::tokenizer

// Content hashing for cache keys.
#pragma once

#include <string>
#include <string_view>

namespace cuda_agent {

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// Accumulates several fields into one SHA-256; each field is length-prefixed so
// ("ab","c") and ("a","bc") differ.
class Hasher {
 public:
  Hasher& Add(std::string_view field);
  std::string HexDigest() const { return Sha256Hex(buffer_); }

 private:
  std::string buffer_;
};

}  // namespace cuda_agent

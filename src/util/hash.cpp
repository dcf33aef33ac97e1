#include "cuda_agent/util/hash.h"

#include <openssl/evp.h>

namespace cuda_agent {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

Hasher& Hasher::Add(std::string_view field) {
  buffer_ += std::to_string(field.size());
  buffer_ += ':';
  buffer_ += field;
  return *this;
}

}  // namespace cuda_agent

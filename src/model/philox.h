// Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and
// Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC'11): four 32-bit
// words from a 128-bit counter and a 64-bit key, no state, so each element
// of a kernel draws its own numbers from (its index, a call's offset).
// Host and device (sample_kernels.cu); checked against the paper's
// published known-answer vectors (tests/model/philox_test.cpp).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define CUDA_AGENT_HOST_DEVICE __host__ __device__
#else
#define CUDA_AGENT_HOST_DEVICE
#endif

namespace cuda_agent::model {

struct PhiloxWords {
  uint32_t w[4];
};

CUDA_AGENT_HOST_DEVICE inline PhiloxWords Philox4x32(PhiloxWords c, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) key0 += kW0, key1 += kW1;
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.w[0], p1 = static_cast<uint64_t>(kM1) * c.w[2];
    c = {{static_cast<uint32_t>(p1 >> 32) ^ c.w[1] ^ key0, static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c.w[3] ^ key1, static_cast<uint32_t>(p0)}};
  }
  return c;
}

}  // namespace cuda_agent::model

// The pick of a token from a row of logits, shared by the sampling kernel
// (sample_kernels.cu, SampleTokens) and the batch-1 LM head that samples as
// it goes (head_kernels.cu, HeadRow): each element's key, the running state
// of a part of the row, the merge of the parts, and the device mapping of
// the pinned memory the picks go to. Nvcc only.
//
// A draw is the Gumbel-max: the argmax of z / t + g, g = -log(-log u), picks
// token i with probability softmax(z / t)_i. The uniforms u come from
// Philox4x32-10 (philox.h), counter (element / 4, row, offset), key the
// seed: no state, and every element and call gets its own, so any split of
// the row into parts draws the same token.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "philox.h"

namespace cuda_agent::model::kernels {

constexpr int kPickFloats = 5;  // a Pick in memory (StorePick)

// What a part of a row leaves: its softmax statistics relative to its max
// (m, s = sum e^(z - m)), and the best key with its token and z.
struct Pick {
  float m = -INFINITY, s = 0, key = -INFINITY, z = 0;
  int index = INT_MAX;

  __device__ void Add(float zi, float key_i, int i) {
    if (zi > m) {
      s = s * expf(m - zi) + 1;
      m = zi;
    } else if (zi != -INFINITY) {
      s += expf(zi - m);
    }
    if (key_i > key || (key_i == key && i < index)) key = key_i, z = zi, index = i;  // the first of ties, as argmax
  }

  __device__ void Merge(const Pick& o) {
    if (o.s > 0) {
      if (s == 0) {
        m = o.m, s = o.s;
      } else {
        const float M = fmaxf(m, o.m);
        s = s * expf(m - M) + o.s * expf(o.m - M);
        m = M;
      }
    }
    if (o.key > key || (o.key == key && o.index < index)) key = o.key, z = o.z, index = o.index;
  }

  __device__ Pick ShuffleXor(int offset) const {
    Pick o;
    o.m = __shfl_xor_sync(0xffffffff, m, offset);
    o.s = __shfl_xor_sync(0xffffffff, s, offset);
    o.key = __shfl_xor_sync(0xffffffff, key, offset);
    o.z = __shfl_xor_sync(0xffffffff, z, offset);
    o.index = __shfl_xor_sync(0xffffffff, index, offset);
    return o;
  }
};

// A row's draw: the noise from (seed, offset), and 1 / t of the logits.
struct Draw {
  uint64_t seed = 0, offset = 0;
  int64_t row = 0;
  float scale = 1;  // 1 / t
  bool draw = false;  // t > 0; else the argmax

  __device__ Draw(float temperature, uint64_t seed_, uint64_t offset_, int64_t row_)
      : seed(seed_), offset(offset_), row(row_), scale(temperature > 0 ? 1.f / temperature : 1.f),
        draw(temperature > 0) {}

  // The key of element i, whose tempered logit is zi, given Philox's words
  // of its group of four (Words(i / 4)).
  __device__ float Key(float zi, int64_t i, const PhiloxWords& bits) const {
    if (!draw) return zi;
    const int q = static_cast<int>(i % 4);  // a select, not a run-time index into local memory
    const uint32_t w = q == 0 ? bits.w[0] : q == 1 ? bits.w[1] : q == 2 ? bits.w[2] : bits.w[3];
    const float u = (static_cast<float>(w >> 8) + 0.5f) * (1.f / 16777216.f);  // in (0, 1)
    return zi - logf(-logf(u));
  }
  __device__ PhiloxWords Words(int64_t group) const {
    return Philox4x32({{static_cast<uint32_t>(group), static_cast<uint32_t>(row), static_cast<uint32_t>(offset),
                        static_cast<uint32_t>(offset >> 32)}},
                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  }
};

__device__ inline void StorePick(float* to, const Pick& p) {
  to[0] = p.m, to[1] = p.s, to[2] = p.key, to[3] = p.z, to[4] = __int_as_float(p.index);
}
// One stored by another block (after LastToFinish), through L2.
__device__ inline Pick LoadPick(const float* from) {
  Pick p;
  p.m = __ldcg(from), p.s = __ldcg(from + 1), p.key = __ldcg(from + 2), p.z = __ldcg(from + 3);
  p.index = __float_as_int(__ldcg(from + 4));
  return p;
}
// The row's token and its logprob from the merged pick: out[row] and
// out[rows + row], and the same into host_out where set.
__device__ inline void StoreToken(const Pick& all, int64_t row, int64_t rows, float* out, float* host_out) {
  const float token = static_cast<float>(all.index), logprob = all.z - (all.m + logf(all.s));
  out[row] = token, out[rows + row] = logprob;
  if (host_out) host_out[row] = token, host_out[rows + row] = logprob;
}

// The device's address of pinned host memory at `host`, or null.
template <typename T>
T* DeviceMapping(T* host) {
  void* mapped = nullptr;
  if (cudaHostGetDevicePointer(&mapped, const_cast<std::remove_const_t<T>*>(host), 0) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return nullptr;
  }
  return static_cast<T*>(mapped);
}

}  // namespace cuda_agent::model::kernels

// A decode step's sampling in one kernel (fused_kernels.h SampleTokens): per
// row of logits the chosen token and its logprob, for greedy rows and for
// draws from the tempered softmax. ATen needs a float copy of the logits, an
// argmax, a log softmax and a gather for the same, and runs a batch-1 log
// softmax in one block (34 us for a 152k vocabulary on an H200).
//
// A draw is the Gumbel-max: the argmax of z / t + g, g = -log(-log u), picks
// token i with probability softmax(z / t)_i. The uniforms u come from
// Philox4x32-10 (philox.h), counter (element / 4, row, offset), key the
// seed: no state, and every element and call gets its own.
#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "fused_kernels.h"
#include "kernel_util.cuh"
#include "philox.h"

namespace cuda_agent::model::kernels {
namespace {

constexpr int kSampleThreads = 256;
constexpr int64_t kSampleMaxSplits = kSampleThreads;  // the last block merges a split per thread
constexpr int kPickFloats = 5;

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

// Block (split, row) picks over its run of the row; the last block of a row
// to finish merges the runs.
template <typename T, int N>
__global__ void __launch_bounds__(kSampleThreads)
    SampleTokensKernel(const T* __restrict__ logits, int64_t vocab, const float* __restrict__ temperature,
                       float uniform_temperature, uint64_t seed, uint64_t offset, float* __restrict__ work,
                       int* __restrict__ counters, float* __restrict__ out, float* __restrict__ host_out) {
  const int64_t row = blockIdx.y, splits = gridDim.x;
  const float t = temperature ? temperature[row] : uniform_temperature;
  const bool draw = t > 0;
  const float scale = draw ? 1.f / t : 1.f;
  const int64_t run = (vocab + splits * N - 1) / (splits * N) * N;  // a multiple of the pack
  const int64_t begin = blockIdx.x * run, end = min(vocab, begin + run);
  const T* z = logits + row * vocab;
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  Pick pick;
  for (int64_t j = begin + threadIdx.x * N; j < end; j += kSampleThreads * N) {
    const Pack<T, N> p = *reinterpret_cast<const Pack<T, N>*>(z + j);
    PhiloxWords bits = {};
    int64_t group = -1;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float zi = ToFloat(p.v[e]) * scale;
      float k = zi;
      if (draw) {
        const int64_t i = j + e;
        if (i / 4 != group) {
          group = i / 4;
          bits = Philox4x32({{static_cast<uint32_t>(group), static_cast<uint32_t>(row), static_cast<uint32_t>(offset),
                              static_cast<uint32_t>(offset >> 32)}},
                            key0, key1);
        }
        const int q = static_cast<int>(i % 4);  // a select, not a run-time index into local memory
        const uint32_t w = q == 0 ? bits.w[0] : q == 1 ? bits.w[1] : q == 2 ? bits.w[2] : bits.w[3];
        const float u = (static_cast<float>(w >> 8) + 0.5f) * (1.f / 16777216.f);  // in (0, 1)
        k = zi - logf(-logf(u));
      }
      pick.Add(zi, k, static_cast<int>(j + e));
    }
  }
  pick = BlockMerge<kSampleThreads>(pick);
  if (threadIdx.x == 0) {
    float* mine = work + (row * splits + blockIdx.x) * kPickFloats;
    mine[0] = pick.m, mine[1] = pick.s, mine[2] = pick.key, mine[3] = pick.z, mine[4] = __int_as_float(pick.index);
  }
  __shared__ bool last;
  if (!LastToFinish(&counters[row], splits, &last, [] { __syncthreads(); })) return;
  Pick all;
  if (threadIdx.x < splits) {
    const float* theirs = work + (row * splits + threadIdx.x) * kPickFloats;
    all.m = __ldcg(theirs), all.s = __ldcg(theirs + 1), all.key = __ldcg(theirs + 2), all.z = __ldcg(theirs + 3);
    all.index = __float_as_int(__ldcg(theirs + 4));
  }
  all = BlockMerge<kSampleThreads>(all);
  if (threadIdx.x == 0) {
    const float token = static_cast<float>(all.index), logprob = all.z - (all.m + logf(all.s));
    out[row] = token, out[gridDim.y + row] = logprob;
    if (host_out) host_out[row] = token, host_out[gridDim.y + row] = logprob;
  }
}

// One block: the staged rows first, then the fed tokens over the ids the
// staging wrote (their slots and rows read back from inputs).
__global__ void StageDecodeInputsKernel(const int64_t* __restrict__ staging, int64_t rows, int64_t stride,
                                        const float* __restrict__ picks, int64_t fed, int64_t* __restrict__ inputs) {
  for (int64_t i = threadIdx.x; i < 5 * rows; i += blockDim.x)
    inputs[i / rows * stride + i % rows] = staging[i / rows * stride + i % rows];
  __syncthreads();
  for (int64_t i = threadIdx.x; i < fed; i += blockDim.x)
    inputs[inputs[2 * stride + i]] = static_cast<int64_t>(picks[inputs[3 * stride + i]]);
}

__global__ void CopyToPinnedKernel(const float* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = src[i];
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

}  // namespace

int StageDecodeInputs(const int64_t* staging, int64_t rows, int64_t stride, const float* picks, int64_t fed,
                      int64_t* inputs, cudaStream_t stream) {
  if (rows == 0) return 0;
  const int64_t* mapped = DeviceMapping(staging);
  if (!mapped) return static_cast<int>(cudaErrorInvalidValue);
  StageDecodeInputsKernel<<<1, 256, 0, stream>>>(mapped, rows, stride, picks, fed, inputs);
  return static_cast<int>(cudaGetLastError());
}

int CopyToPinned(const float* src, float* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  float* mapped = DeviceMapping(dst);
  if (!mapped) return static_cast<int>(cudaErrorInvalidValue);
  CopyToPinnedKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(src, mapped, n);
  return static_cast<int>(cudaGetLastError());
}

int64_t SampleTokensSplits(int64_t rows, int64_t vocab) {
  // About two blocks per SM over all rows, each run at least 2048 elements.
  const int64_t by_size = (vocab + 2047) / 2048, by_rows = (2 * MultiprocessorCount() + rows - 1) / rows;
  return std::max<int64_t>(1, std::min({by_size, by_rows, kSampleMaxSplits}));
}

int SampleTokens(Dtype dtype, const void* logits, int64_t rows, int64_t vocab, const float* temperature,
                 float uniform_temperature, uint64_t seed, uint64_t offset, float* work, int* counters, float* out,
                 float* host_out, cudaStream_t stream) {
  if (rows == 0) return 0;
  float* mapped = host_out ? DeviceMapping(host_out) : nullptr;
  if (host_out && !mapped) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t splits = SampleTokensSplits(rows, vocab);
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    WithPackWidth<T>(Packed<T>({logits}, vocab), [&](auto width) {
      SampleTokensKernel<T, decltype(width)::value>
          <<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(rows)), kSampleThreads, 0, stream>>>(
              static_cast<const T*>(logits), vocab, temperature, uniform_temperature, seed, offset, work, counters,
              out, mapped);
    });
  });
}

}  // namespace cuda_agent::model::kernels

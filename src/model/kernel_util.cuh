// Device helpers shared by the fused kernels (fused_kernels.cu) and the decode
// kernels (decode_kernels.cu): element conversions, 16-byte packs, warp sums,
// dtype dispatch. Internal to the model component; nvcc only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "fused_kernels.h"

namespace cuda_agent::model::kernels {

__device__ inline float ToFloat(float x) { return x; }
__device__ inline float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float ToFloat(__half x) { return __half2float(x); }

template <typename T>
__device__ inline T FromFloat(float x);
template <>
__device__ inline float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__device__ inline __half FromFloat<__half>(float x) {
  return __float2half(x);
}

// N elements moved as one aligned load or store.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Sums v over the warp; every lane gets the total.
__device__ inline float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

// The current GPU's multiprocessors, asked once (defined in decode_kernels.cu).
int64_t MultiprocessorCount();

// Merges a reduction state S over the warp's lanes; every lane gets the
// result. S: default-constructible as the empty state, with
// `S ShuffleXor(int offset) const` (lane ^ offset's state) and
// `void Merge(const S&)`.
template <typename S>
__device__ S WarpMerge(S s) {
  for (int offset = 16; offset > 0; offset /= 2) s.Merge(s.ShuffleXor(offset));
  return s;
}

// The same over a block of at most kThreads threads; complete in thread 0.
template <int kThreads, typename S>
__device__ S BlockMerge(S s) {
  __shared__ S warps[kThreads / 32];
  s = WarpMerge(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warps[warp] = s;
  __syncthreads();
  if (warp == 0) s = WarpMerge(lane < static_cast<int>(blockDim.x / 32) ? warps[lane] : S());
  return s;
}

// Whether this block is the last of `blocks` to get here on `counter`; every
// thread that calls it gets the answer. What any of them wrote before is
// visible to the last one's loads through L2 (__ldcg) after. The last one
// leaves the counter zero, for the next use. sync(): the barrier of the
// block's threads that call it; `flag`: a bool of shared memory.
template <typename Sync>
__device__ bool LastToFinish(int* counter, int64_t blocks, bool* flag, Sync sync) {
  __threadfence();  // this thread's writes before the count
  sync();
  if (threadIdx.x == 0) {
    *flag = atomicAdd(counter, 1) == blocks - 1;
    if (*flag) *counter = 0;
  }
  sync();
  const bool last = *flag;
  if (last) __threadfence();  // the other blocks' writes after their counts
  return last;
}

// Calls f(T{}) with the C++ type of `dtype`.
template <typename F>
int Dispatch(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::kFloat:
      f(float{});
      break;
    case Dtype::kBFloat16:
      f(__nv_bfloat16{});
      break;
    case Dtype::kHalf:
      f(__half{});
      break;
  }
  return static_cast<int>(cudaGetLastError());
}

// Rows (or runs) of n elements at `pointers` can move in 16-byte packs: n is
// a multiple of the pack and every pointer given (not null) is aligned.
template <typename T>
bool Packed(std::initializer_list<const void*> pointers, int64_t n) {
  bool packed = n % static_cast<int64_t>(16 / sizeof(T)) == 0;
  for (const void* p : pointers) packed = packed && (p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0);
  return packed;
}

// Calls launch(width) with width the pack (16 bytes of T) or 1, as a constant.
template <typename T, typename Launch>
void WithPackWidth(bool packed, Launch&& launch) {
  if (packed)
    launch(std::integral_constant<int, 16 / sizeof(T)>{});
  else
    launch(std::integral_constant<int, 1>{});
}

}  // namespace cuda_agent::model::kernels

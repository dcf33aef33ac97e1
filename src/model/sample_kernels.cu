// A decode step's sampling in one kernel (fused_kernels.h SampleTokens): per
// row of logits the chosen token and its logprob, for greedy rows and for
// draws from the tempered softmax (sample_common.cuh: the Gumbel-max over
// Philox noise). ATen needs a float copy of the logits, an argmax, a log
// softmax and a gather for the same, and runs a batch-1 log softmax in one
// block (34 us for a 152k vocabulary on an H200).
#include <algorithm>

#include "fused_kernels.h"
#include "kernel_util.cuh"
#include "sample_common.cuh"

namespace cuda_agent::model::kernels {
namespace {

constexpr int kSampleThreads = 256;
constexpr int64_t kSampleMaxSplits = kSampleThreads;  // the last block merges a split per thread

// Block (split, row) picks over its run of the row; the last block of a row
// to finish merges the runs.
template <typename T, int N>
__global__ void __launch_bounds__(kSampleThreads)
    SampleTokensKernel(const T* __restrict__ logits, int64_t vocab, const float* __restrict__ temperature,
                       float uniform_temperature, uint64_t seed, uint64_t offset, float* __restrict__ work,
                       int* __restrict__ counters, float* __restrict__ out, float* __restrict__ host_out) {
  const int64_t row = blockIdx.y, splits = gridDim.x;
  const Draw draw(temperature ? temperature[row] : uniform_temperature, seed, offset, row);
  const int64_t run = (vocab + splits * N - 1) / (splits * N) * N;  // a multiple of the pack
  const int64_t begin = blockIdx.x * run, end = min(vocab, begin + run);
  const T* z = logits + row * vocab;
  Pick pick;
  for (int64_t j = begin + threadIdx.x * N; j < end; j += kSampleThreads * N) {
    const Pack<T, N> p = *reinterpret_cast<const Pack<T, N>*>(z + j);
    PhiloxWords bits = {};
    int64_t group = -1;
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const float zi = ToFloat(p.v[e]) * draw.scale;
      const int64_t i = j + e;
      if (draw.draw && i / 4 != group) group = i / 4, bits = draw.Words(group);
      pick.Add(zi, draw.Key(zi, i, bits), static_cast<int>(i));
    }
  }
  pick = BlockMerge<kSampleThreads>(pick);
  if (threadIdx.x == 0) StorePick(work + (row * splits + blockIdx.x) * kPickFloats, pick);
  __shared__ bool last;
  if (!LastToFinish(&counters[row], splits, &last, [] { __syncthreads(); })) return;
  Pick all;
  if (threadIdx.x < splits) all = LoadPick(work + (row * splits + threadIdx.x) * kPickFloats);
  all = BlockMerge<kSampleThreads>(all);
  if (threadIdx.x == 0) StoreToken(all, row, gridDim.y, out, host_out);
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

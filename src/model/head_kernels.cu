// The LM head of a decode step in one kernel (decode_kernels.h, HeadLogits):
// the final RMSNorm of up to kDecodeMaxRows rows, then their logits against
// the [vocab, hidden] head on the tensor cores, the head's 16-bit weights
// streamed from DRAM once under an evict-first L2 policy.
//
// A warp takes 16 vocabulary rows at a time: lane (r, q) = (lane / 4,
// lane % 4) loads 16 bytes of row r and of row r + 8 at k 8 q .. 8 q + 7 of
// each 32-element block of k, and the 8 elements of batch row r of the
// normalised input at the same k from shared memory. A dot product does not
// depend on the order of k, so those registers are the m16n8k16 fragments
// as they are (row r's elements 0-1 and 2-3 are A's k 2q, 2q + 1 and
// 2q + 8, 2q + 9, and so on), two products per block of k: the weights need
// no shared memory and no shuffles, and up to 8 batch rows cost what one
// does. cuBLAS's GEMV streams Qwen2.5-0.5B's 272 MB head at ~4.15 TB/s, with
// L2's default policy, which evicts the layers' code, keys and values
// between steps. This kernel is not faster yet: batch-1 decode on an H200
// took ~24 us a step more with it (1574.6 against 1636.1 tok/s). A lane's
// 16-byte loads cover half of each 128-byte line of a row at a time; loads
// of whole lines (32 bytes a lane, 4 products a load) are the next thing to
// measure (decode_kernels_bench prints it next to cuBLAS).
#include <algorithm>
#include <type_traits>

#include "decode_common.cuh"
#include "sample_common.cuh"

namespace cuda_agent::model::kernels {
namespace {

constexpr int kHeadWarps = 8;
constexpr int kHeadBlocksPerSm = 3;  // 24 warps an SM (at most 85 registers a thread)
constexpr int kHeadBlocksInFlight = 4;  // blocks of k whose loads a lane has in flight together

// 16 bytes of weights read once: not kept in L1, first out of L2.
__device__ inline uint4 LoadStreamed(const void* p, uint64_t policy) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy));
  return v;
}

template <typename T>
__global__ void __launch_bounds__(kHeadWarps * 32, kHeadBlocksPerSm) HeadLogitsKernel(HeadLogitsArgs a) {
  extern __shared__ __align__(16) unsigned char shared[];
  T* xs = reinterpret_cast<T*>(shared);  // [rows, hidden]: the normalised input
  const int rows = static_cast<int>(a.rows), hidden = static_cast<int>(a.hidden);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // RMSNorm, a warp per batch row, as at::rms_norm on CUDA computes it: fp32
  // statistics and arithmetic, one rounding.
  for (int b = warp; b < rows; b += kHeadWarps) {
    const T* x = static_cast<const T*>(a.h) + static_cast<int64_t>(b) * hidden;
    float ss = 0;
    for (int e = lane; e < hidden; e += 32) {
      const float f = ToFloat(x[e]);
      ss += f * f;
    }
    const float r = rsqrtf(WarpSum(ss) / static_cast<float>(hidden) + a.eps);
    const T* w = static_cast<const T*>(a.norm_weight);
    for (int e = lane; e < hidden; e += 32) xs[b * hidden + e] = FromFloat<T>(ToFloat(x[e]) * r * ToFloat(w[e]));
  }
  __syncthreads();
  const int r = lane / 4, q = lane % 4, blocks = hidden / 32;
  const int64_t groups = (a.vocab + 15) / 16;
  const uint64_t policy = EvictFirst();
  const T* x = xs + r * hidden + 8 * q;  // batch row r, if there is one
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kHeadWarps + warp; g < groups;
       g += static_cast<int64_t>(gridDim.x) * kHeadWarps) {
    // Rows past the vocabulary: the last row again, its products not stored.
    const T* w_lo = static_cast<const T*>(a.head) + min(g * 16 + r, a.vocab - 1) * hidden + 8 * q;
    const T* w_hi = static_cast<const T*>(a.head) + min(g * 16 + r + 8, a.vocab - 1) * hidden + 8 * q;
    float d[2][4] = {};  // the two products of a block: two chains
    for (int k0 = 0; k0 < blocks; k0 += kHeadBlocksInFlight) {
      uint4 lo[kHeadBlocksInFlight], hi[kHeadBlocksInFlight];
#pragma unroll
      for (int u = 0; u < kHeadBlocksInFlight; ++u) {
        const int kb = min(k0 + u, blocks - 1);  // past k: a block again, not multiplied
        lo[u] = LoadStreamed(w_lo + kb * 32, policy);
        hi[u] = LoadStreamed(w_hi + kb * 32, policy);
      }
#pragma unroll
      for (int u = 0; u < kHeadBlocksInFlight; ++u) {
        if (k0 + u >= blocks) break;
        const uint4 xv = r < rows ? *reinterpret_cast<const uint4*>(x + (k0 + u) * 32) : uint4{};
        Mma16x8x16<T>(d[0], lo[u].x, hi[u].x, lo[u].y, hi[u].y, xv.x, xv.y);
        Mma16x8x16<T>(d[1], lo[u].z, hi[u].z, lo[u].w, hi[u].w, xv.z, xv.w);
      }
    }
    // Lane (r, q) holds rows r (j = 0, 1) and r + 8 (j = 2, 3) of the 16,
    // batch rows 2 q and 2 q + 1.
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t v = g * 16 + r + j / 2 * 8;
      const int b = 2 * q + j % 2;
      if (v < a.vocab && b < rows) static_cast<T*>(a.out)[b * a.vocab + v] = FromFloat<T>(d[0][j] + d[1][j]);
    }
  }
}

// ---- Batch 1: the head as one stream (HeadRow) ----
//
// The head read as spans of P whole rows (P = 1 or 2) that are L whole
// warp-wide loads of 16 bytes a lane (P * hidden * 2 = 512 L bytes): each
// load is 512 contiguous bytes, a warp's L loads of a span one contiguous
// run, and the warps' spans interleaved over the matrix. A lane's chunks sit
// at the same columns of every span (the input's chunks come from shared
// memory); those of a span's second row add to a second sum. The next
// span's loads are issued before the products of this one, the weights
// under an evict-first L2 policy (read once a step; cuBLAS's GEMV leaves
// L2's default policy, which pushes the persistent kernel's code, keys and
// values out of L2 between steps). Launched as the persistent kernel's
// dependent: its blocks take the SMs as that kernel's leave and issue their
// first loads before they wait for its end (cudaGridDependencySynchronize),
// which the input needs. kSample: after the loop each warp adds the logits
// it stored to a pick (sample_common.cuh), each block leaves its warps'
// merged in a.work, and the last block to finish merges those into the
// token (no sampling kernel after).
constexpr int kRowWarps = 8;
constexpr int kRowBlocksPerSm = 2;  // 16 warps an SM: at most 128 registers a thread, 7 loads a span
constexpr int kRowMaxHidden = 1792;  // 7 loads a span of one row

// A 32-bit word's two 16-bit elements in fp32.
__device__ inline float2 Pair(uint32_t u, __nv_bfloat16) {
  return {__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u)};
}
__device__ inline float2 Pair(uint32_t u, __half) {
  __half2 h;
  memcpy(&h, &u, 4);
  return __half22float2(h);
}
// The 8 products of a chunk of weights w and the input's elements x at its
// columns, in fp32.
template <typename T>
__device__ inline float ChunkDot(const uint4& w, const uint4& x, T) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w}, xs[4] = {x.x, x.y, x.z, x.w};
  float d[2] = {};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 a = Pair(ws[e], T{}), b = Pair(xs[e], T{});
    d[0] = fmaf(a.x, b.x, d[0]);
    d[1] = fmaf(a.y, b.y, d[1]);
  }
  return d[0] + d[1];
}

template <typename T, int L, bool kSample>
__global__ void __launch_bounds__(kRowWarps * 32, kRowBlocksPerSm) HeadRowKernel(HeadRowArgs a) {
  __shared__ uint4 xs[kRowMaxHidden / 8];  // the input, 16 bytes a chunk
  const int lane = threadIdx.x % 32, per_row = static_cast<int>(a.hidden / 8);  // chunks of 16 bytes a row
  const int P = 32 * L / per_row;
  const int64_t spans = a.vocab / P, warps = static_cast<int64_t>(gridDim.x) * kRowWarps;
  const uint4* head = static_cast<const uint4*>(a.head) + lane;
  const uint64_t policy = EvictFirst();
  auto load = [&](uint4(&w)[L], int64_t s) {
#pragma unroll
    for (int i = 0; i < L; ++i) w[i] = LoadStreamed(head + (s * L + i) * 32, policy);
  };
  int64_t s = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  uint4 w0[L], w1[L];
  if (s < spans) load(w0, s);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();  // the input is the kernel's before
#endif
#pragma unroll 1
  for (int c = threadIdx.x; c < per_row; c += kRowWarps * 32) xs[c] = static_cast<const uint4*>(a.x)[c];
  __syncthreads();
  T* out = static_cast<T*>(a.out);
  auto take = [&](const uint4(&w)[L], int64_t span) {
    float first = 0, last = 0;  // the span's rows (selects, not an index: the sums stay in registers)
#pragma unroll
    for (int i = 0; i < L; ++i) {
      const int c = 32 * i + lane;
      const bool second = c >= per_row;  // of the span's second row
      const float d = ChunkDot(w[i], xs[second ? c - per_row : c], T{});
      if (second)
        last += d;
      else
        first += d;
    }
    first = WarpSum(first);
    if (P == 2) last = WarpSum(last);
    if (lane == 0) {
      out[span * P] = FromFloat<T>(first);
      if (P == 2) out[span * P + 1] = FromFloat<T>(last);
    }
  };
  for (; s < spans; s += 2 * warps) {
    if (s + warps < spans) load(w1, s + warps);
    take(w0, s);
    if (s + warps >= spans) break;
    if (s + 2 * warps < spans) load(w0, s + 2 * warps);
    take(w1, s + warps);
  }
  if constexpr (kSample) {
    // The warp's spans are first + k * warps; lane j adds those with k = j
    // mod 32, as stored (lane 0's stores, ordered by the __syncwarp).
    // Sampling in the loop above, where the next span's loads hold their
    // registers, spilled.
    __syncwarp();
    const Draw draw(a.temperature, a.seed, a.offset, 0);
    Pick pick;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
    for (int64_t span = first + lane * warps; span < spans; span += 32 * warps) {
      const PhiloxWords bits = draw.draw ? draw.Words(span * P / 4) : PhiloxWords{};  // a span's rows: one group
      for (int r = 0; r < P; ++r) {
        const int64_t i = span * P + r;
        const float zi = ToFloat(out[i]) * draw.scale;
        pick.Add(zi, draw.Key(zi, i, bits), static_cast<int>(i));
      }
    }
    pick = BlockMerge<kRowWarps * 32>(pick);
    if (threadIdx.x == 0) StorePick(a.work + blockIdx.x * kPickFloats, pick);
    __shared__ bool last;
    if (!LastToFinish(a.counter, gridDim.x, &last, [] { __syncthreads(); })) return;
    Pick all;
    for (int i = threadIdx.x; i < static_cast<int>(gridDim.x); i += kRowWarps * 32)
      all.Merge(LoadPick(a.work + i * kPickFloats));
    all = BlockMerge<kRowWarps * 32>(all);
    if (threadIdx.x == 0) StoreToken(all, 0, 1, a.picks, a.host_picks);
  }
}

// Loads of 16 bytes a span (L) of a 16-bit head, or 0 where no kernel takes
// the shape: spans of one or two rows, 4 to 7 loads long (at 8 the
// registers spill).
int64_t HeadRowLoads(int64_t hidden, int64_t vocab) {
  const int64_t row = hidden * 2;  // bytes
  if (hidden <= 0 || (row % 512 != 0 && 2 * row % 512 != 0)) return 0;
  const int64_t rows = row % 512 == 0 ? 1 : 2, loads = rows * row / 512;
  return vocab % rows == 0 && loads >= 4 && loads <= 7 ? loads : 0;
}

// The blocks of a HeadRow launch: two an SM, or fewer where the head has
// fewer spans than their warps.
int64_t HeadRowBlocks(int64_t hidden, int64_t vocab) {
  const int64_t spans = vocab / (32 * HeadRowLoads(hidden, vocab) / (hidden / 8));
  return std::min(MultiprocessorCount() * kRowBlocksPerSm, (spans + kRowWarps - 1) / kRowWarps);
}

// The shared memory a block may opt in to; 0 before Ampere (mma.sync on
// 16-bit types). Asked once: the calls may come while a CUDA graph is being
// captured.
int SharedOptin() {
  static const int optin = [] {
    int device = 0, bytes = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    return major >= 8 ? bytes : 0;
  }();
  return optin;
}

}  // namespace

bool HeadRowFits(Dtype dtype, int64_t hidden, int64_t vocab) {
  static const bool hopper = [] {
    int device = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    return major >= 9;
  }();
  return hopper && dtype != Dtype::kFloat && vocab > 0 && HeadRowLoads(hidden, vocab) > 0;
}

int64_t HeadRowWorkFloats() { return MultiprocessorCount() * kRowBlocksPerSm * kPickFloats; }

int HeadRow(Dtype dtype, const HeadRowArgs& args, cudaStream_t stream) {
  if (!HeadRowFits(dtype, args.hidden, args.vocab) || (args.picks && (!args.work || !args.counter)))
    return static_cast<int>(cudaErrorInvalidValue);
  HeadRowArgs a = args;
  if (a.host_picks && !(a.host_picks = DeviceMapping(args.host_picks))) return static_cast<int>(cudaErrorInvalidValue);
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      const int64_t L = HeadRowLoads(args.hidden, args.vocab);
      const dim3 grid(static_cast<unsigned>(HeadRowBlocks(args.hidden, args.vocab)));
      const dim3 block(kRowWarps * 32);
      auto launch = [&](auto sample) {
        constexpr bool kSample = decltype(sample)::value;
        switch (L) {
          case 4: LaunchDependent(HeadRowKernel<T, 4, kSample>, grid, block, 0, stream, a); break;
          case 5: LaunchDependent(HeadRowKernel<T, 5, kSample>, grid, block, 0, stream, a); break;
          case 6: LaunchDependent(HeadRowKernel<T, 6, kSample>, grid, block, 0, stream, a); break;
          default: LaunchDependent(HeadRowKernel<T, 7, kSample>, grid, block, 0, stream, a); break;
        }
      };
      if (a.picks)
        launch(std::true_type{});
      else
        launch(std::false_type{});
    }
  });
}

bool HeadLogitsFit(Dtype dtype, int64_t rows, int64_t hidden) {
  return dtype != Dtype::kFloat && rows >= 1 && rows <= kDecodeMaxRows && hidden > 0 && hidden % 32 == 0 &&
         rows * hidden * 2 <= SharedOptin();
}

int HeadLogits(Dtype dtype, const HeadLogitsArgs& args, cudaStream_t stream) {
  if (!HeadLogitsFit(dtype, args.rows, args.hidden) || args.vocab < 1) return static_cast<int>(cudaErrorInvalidValue);
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      const int64_t bytes = args.rows * args.hidden * static_cast<int64_t>(sizeof(T));
      // Once: room for any input HeadLogitsFit takes.
      static const bool configured =
          (cudaFuncSetAttribute(HeadLogitsKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SharedOptin()),
           true);
      (void)configured;
      const int64_t groups = (args.vocab + 15) / 16;
      const int64_t blocks =
          std::min(MultiprocessorCount() * kHeadBlocksPerSm, (groups + kHeadWarps - 1) / kHeadWarps);
      HeadLogitsKernel<T><<<static_cast<unsigned>(blocks), kHeadWarps * 32, static_cast<size_t>(bytes), stream>>>(args);
    }
  });
}

}  // namespace cuda_agent::model::kernels

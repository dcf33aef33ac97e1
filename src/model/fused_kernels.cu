// Fused CUDA kernels of the training forward and backward (fused_kernels.h):
// memory-bound passes that ATen would split into several kernels and fp32
// temporaries. Arithmetic in fp32, inputs and outputs in the model's dtype.
#include "fused_kernels.h"

#include <cmath>

#include "kernel_util.cuh"

namespace cuda_agent::model::kernels {
namespace {

// Softmax statistics of part of a row, relative to its max m:
// s = sum e^(z - m), u = sum e^(z - m) (z - m).
struct SoftmaxState {
  float m = -INFINITY, s = 0, u = 0;

  __device__ void Add(float z) {
    if (z == -INFINITY) return;
    if (z > m) {
      float f = expf(m - z);
      u = s > 0 ? f * (u + s * (m - z)) : 0.f;
      s = f * s + 1;
      m = z;
    } else {
      float e = expf(z - m);
      s += e;
      u += e * (z - m);
    }
  }

  __device__ void Merge(const SoftmaxState& o) {
    if (o.s == 0) return;
    if (s == 0) {
      *this = o;
      return;
    }
    float M = fmaxf(m, o.m), fa = expf(m - M), fb = expf(o.m - M);
    u = fa * (u + s * (m - M)) + fb * (o.u + o.s * (o.m - M));
    s = fa * s + fb * o.s;
    m = M;
  }

  __device__ SoftmaxState ShuffleXor(int offset) const {
    SoftmaxState o;
    o.m = __shfl_xor_sync(0xffffffff, m, offset);
    o.s = __shfl_xor_sync(0xffffffff, s, offset);
    o.u = __shfl_xor_sync(0xffffffff, u, offset);
    return o;
  }
};

constexpr int kRowThreads = 512;

template <typename T, int N>
__global__ void __launch_bounds__(kRowThreads)
    TokenLogprobsForwardKernel(const T* __restrict__ logits, int64_t vocab, const int64_t* __restrict__ targets,
                               float* __restrict__ logp, float* __restrict__ entropy, float* __restrict__ stats) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * vocab;
  SoftmaxState st;
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * N; j < vocab; j += static_cast<int64_t>(blockDim.x) * N) {
    Pack<T, N> p = *reinterpret_cast<const Pack<T, N>*>(z + j);
#pragma unroll
    for (int i = 0; i < N; ++i) st.Add(ToFloat(p.v[i]));
  }
  st = BlockMerge<kRowThreads>(st);
  if (threadIdx.x != 0) return;
  // Relative to the max, so that large logits lose no precision.
  const float log_s = logf(st.s);
  const int64_t t = targets[row];
  stats[2 * row] = st.m;
  stats[2 * row + 1] = log_s;
  entropy[row] = log_s - st.u / st.s;
  logp[row] = t >= 0 && t < vocab ? (ToFloat(z[t]) - st.m) - log_s : NAN;
}

template <typename T, int N>
__global__ void __launch_bounds__(kRowThreads)
    TokenLogprobsBackwardKernel(const T* __restrict__ logits, int64_t vocab, const int64_t* __restrict__ targets,
                                const float* __restrict__ grad_logp, const float* __restrict__ grad_entropy,
                                const float* __restrict__ stats, const float* __restrict__ entropy,
                                T* __restrict__ grad) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * vocab;
  T* g = grad + row * vocab;
  const float gl = grad_logp ? grad_logp[row] : 0.f, ge = grad_entropy ? grad_entropy[row] : 0.f;
  const float m = stats[2 * row], log_s = stats[2 * row + 1], h = entropy[row];
  const int64_t t = targets[row];
  for (int64_t j = static_cast<int64_t>(threadIdx.x) * N; j < vocab; j += static_cast<int64_t>(blockDim.x) * N) {
    Pack<T, N> in = *reinterpret_cast<const Pack<T, N>*>(z + j), out;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float lp = (ToFloat(in.v[i]) - m) - log_s, p = expf(lp);
      float d = -p * (gl + ge * (lp + h));
      if (j + i == t) d += gl;
      out.v[i] = FromFloat<T>(d);
    }
    *reinterpret_cast<Pack<T, N>*>(g + j) = out;
  }
}

template <typename T>
__global__ void RotaryKernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin,
                             int64_t rows, int64_t heads, int64_t dim, bool transpose, T* __restrict__ out) {
  const int64_t half = dim / 2, total = rows * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, rh = idx / half, row = rh / heads;
    const T* xr = x + rh * dim;
    const T* c = cos + row * dim;
    const T* s = sin + row * dim;
    const float a = ToFloat(xr[i]), b = ToFloat(xr[i + half]);
    const float c0 = ToFloat(c[i]), c1 = ToFloat(c[i + half]), s0 = ToFloat(s[i]), s1 = ToFloat(s[i + half]);
    // out = [a c0 - b s0, b c1 + a s1]; its adjoint: [a c0 + b s1, b c1 - a s0].
    out[rh * dim + i] = FromFloat<T>(transpose ? a * c0 + b * s1 : a * c0 - b * s0);
    out[rh * dim + i + half] = FromFloat<T>(transpose ? b * c1 - a * s0 : b * c1 + a * s1);
  }
}

// Over n / N packs of N elements.
template <typename T, int N>
__global__ void SwiGluForwardKernel(const T* __restrict__ gate, const T* __restrict__ up, int64_t packs,
                                    T* __restrict__ out) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < packs;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Pack<T, N> g = reinterpret_cast<const Pack<T, N>*>(gate)[k], u = reinterpret_cast<const Pack<T, N>*>(up)[k], o;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = ToFloat(g.v[i]);
      o.v[i] = FromFloat<T>(x / (1.f + expf(-x)) * ToFloat(u.v[i]));
    }
    reinterpret_cast<Pack<T, N>*>(out)[k] = o;
  }
}

template <typename T, int N>
__global__ void SwiGluBackwardKernel(const T* __restrict__ gate, const T* __restrict__ up,
                                     const T* __restrict__ grad_out, int64_t packs, T* __restrict__ grad_gate,
                                     T* __restrict__ grad_up) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < packs;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Pack<T, N> g = reinterpret_cast<const Pack<T, N>*>(gate)[k], u = reinterpret_cast<const Pack<T, N>*>(up)[k];
    Pack<T, N> go = reinterpret_cast<const Pack<T, N>*>(grad_out)[k], gg, gu;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float x = ToFloat(g.v[i]), d = ToFloat(go.v[i]), sig = 1.f / (1.f + expf(-x));
      gg.v[i] = FromFloat<T>(d * ToFloat(u.v[i]) * sig * (1.f + x * (1.f - sig)));
      gu.v[i] = FromFloat<T>(d * x * sig);
    }
    reinterpret_cast<Pack<T, N>*>(grad_gate)[k] = gg;
    reinterpret_cast<Pack<T, N>*>(grad_up)[k] = gu;
  }
}

// Blocks for a grid-stride loop over n items: enough to fill the device, no more.
unsigned ElementwiseBlocks(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

int TokenLogprobsForward(Dtype dtype, const void* logits, int64_t rows, int64_t vocab, const int64_t* targets,
                         float* logp, float* entropy, float* stats, cudaStream_t stream) {
  if (rows == 0) return 0;
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    WithPackWidth<T>(Packed<T>({logits}, vocab), [&](auto width) {
      TokenLogprobsForwardKernel<T, decltype(width)::value><<<rows, kRowThreads, 0, stream>>>(
          static_cast<const T*>(logits), vocab, targets, logp, entropy, stats);
    });
  });
}

int TokenLogprobsBackward(Dtype dtype, const void* logits, int64_t rows, int64_t vocab, const int64_t* targets,
                          const float* grad_logp, const float* grad_entropy, const float* stats,
                          const float* entropy, void* grad_logits, cudaStream_t stream) {
  if (rows == 0) return 0;
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    WithPackWidth<T>(Packed<T>({logits, grad_logits}, vocab), [&](auto width) {
      TokenLogprobsBackwardKernel<T, decltype(width)::value><<<rows, kRowThreads, 0, stream>>>(
          static_cast<const T*>(logits), vocab, targets, grad_logp, grad_entropy, stats, entropy,
          static_cast<T*>(grad_logits));
    });
  });
}

int Rotary(Dtype dtype, const void* x, const void* cos, const void* sin, int64_t rows, int64_t heads, int64_t dim,
           bool transpose, void* out, cudaStream_t stream) {
  const int64_t pairs = rows * heads * (dim / 2);
  if (pairs == 0) return 0;
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    RotaryKernel<T><<<ElementwiseBlocks(pairs, 256), 256, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(cos), static_cast<const T*>(sin), rows, heads, dim,
        transpose, static_cast<T*>(out));
  });
}

int SwiGluForward(Dtype dtype, const void* gate, const void* up, int64_t n, void* out, cudaStream_t stream) {
  if (n == 0) return 0;
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    WithPackWidth<T>(Packed<T>({gate, up, out}, n), [&](auto width) {
      const int64_t packs = n / decltype(width)::value;
      SwiGluForwardKernel<T, decltype(width)::value><<<ElementwiseBlocks(packs, 256), 256, 0, stream>>>(
          static_cast<const T*>(gate), static_cast<const T*>(up), packs, static_cast<T*>(out));
    });
  });
}

int SwiGluBackward(Dtype dtype, const void* gate, const void* up, const void* grad_out, int64_t n, void* grad_gate,
                   void* grad_up, cudaStream_t stream) {
  if (n == 0) return 0;
  return Dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    WithPackWidth<T>(Packed<T>({gate, up, grad_out, grad_gate, grad_up}, n), [&](auto width) {
      const int64_t packs = n / decltype(width)::value;
      SwiGluBackwardKernel<T, decltype(width)::value><<<ElementwiseBlocks(packs, 256), 256, 0, stream>>>(
          static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(grad_out), packs,
          static_cast<T*>(grad_gate), static_cast<T*>(grad_up));
    });
  });
}

}  // namespace cuda_agent::model::kernels

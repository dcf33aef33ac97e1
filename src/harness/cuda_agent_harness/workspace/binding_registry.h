// Fixed build file of the CUDA-Agent workspace format; candidates cannot change it.
//
// Each kernels/<name>_binding.cpp includes this header and registers its Python
// functions; all of them end up in one extension module named `cuda_extension`:
//
//   #include "binding_registry.h"
//   torch::Tensor axpby(torch::Tensor x, torch::Tensor y, double a, double b);
//   REGISTER_BINDING(m) { m.def("axpby", &axpby); }
#pragma once

#include <torch/extension.h>

#include <vector>

namespace cuda_agent_ext {

using RegisterFn = void (*)(pybind11::module_&);

inline std::vector<RegisterFn>& Registry() {
  static std::vector<RegisterFn> registry;
  return registry;
}

struct Registrar {
  explicit Registrar(RegisterFn fn) { Registry().push_back(fn); }
};

}  // namespace cuda_agent_ext

#define CUDA_AGENT_CONCAT_INNER(a, b) a##b
#define CUDA_AGENT_CONCAT(a, b) CUDA_AGENT_CONCAT_INNER(a, b)
#define REGISTER_BINDING(m)                                                                   \
  static void CUDA_AGENT_CONCAT(cuda_agent_register_, __LINE__)(pybind11::module_ & m);       \
  static ::cuda_agent_ext::Registrar CUDA_AGENT_CONCAT(cuda_agent_registrar_, __LINE__)(      \
      &CUDA_AGENT_CONCAT(cuda_agent_register_, __LINE__));                                    \
  static void CUDA_AGENT_CONCAT(cuda_agent_register_, __LINE__)(pybind11::module_ & m)

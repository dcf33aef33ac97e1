// Fixed build file of the CUDA-Agent workspace format: the module definition
// that collects every REGISTER_BINDING of kernels/*_binding.cpp.
#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) {
  for (auto fn : cuda_agent_ext::Registry()) fn(m);
}

// Explicit instantiations of the paged-attention launcher (kernels/cuda/paged_attention.cuh).
#include "kernels/cuda/paged_attention.cuh"

namespace orbit::kernels::cuda {

#define ORBIT_PAGED_ATTENTION_INSTANTIATE(T)                                                                        \
  template cudaError_t paged_attention<T>(const PagedAttentionArgs<T>&, const PagedAttentionDims&, float*, int64_t, \
                                          cudaStream_t, PagedKernel);
ORBIT_PAGED_ATTENTION_INSTANTIATE(float)
ORBIT_PAGED_ATTENTION_INSTANTIATE(__nv_bfloat16)
ORBIT_PAGED_ATTENTION_INSTANTIATE(__half)
#undef ORBIT_PAGED_ATTENTION_INSTANTIATE

}  // namespace orbit::kernels::cuda

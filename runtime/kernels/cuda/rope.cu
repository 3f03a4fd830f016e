// Explicit instantiations of the RoPE launcher (kernels/cuda/rope.cuh) for the dtypes the ops use.
#include "kernels/cuda/rope.cuh"

namespace orbit::kernels::cuda {

template cudaError_t rope_rotate<float>(const float*, float*, const float*, const float*, const RopeDims&,
                                        cudaStream_t);
template cudaError_t rope_rotate<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, const float*, const float*,
                                                const RopeDims&, cudaStream_t);

}  // namespace orbit::kernels::cuda

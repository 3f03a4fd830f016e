// Explicit instantiations of the patch-apply launcher (kernels/cuda/patch_apply.cuh): canonical and
// target each float32 or bfloat16; factors and cos/sin tables are float32.
#include "kernels/cuda/patch_apply.cuh"

namespace orbit::kernels::cuda {

#define ORBIT_PATCH_APPLY_INSTANTIATE(In, Out)                                                                 \
  template cudaError_t patch_apply<In, Out>(const PatchSource<In>&, const PatchTarget<Out>&, const PatchDims&, \
                                            cudaStream_t);
ORBIT_PATCH_APPLY_INSTANTIATE(float, float)
ORBIT_PATCH_APPLY_INSTANTIATE(float, __nv_bfloat16)
ORBIT_PATCH_APPLY_INSTANTIATE(__nv_bfloat16, float)
ORBIT_PATCH_APPLY_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
#undef ORBIT_PATCH_APPLY_INSTANTIATE

}  // namespace orbit::kernels::cuda

// Instantiates, for one configuration, exactly what the trtllm_comm SM12x patch touches:
// a kernel of trtllm_allreduce.cuh whose body sat behind `__CUDA_ARCH__ < 1200`, and the fused
// AR+residual+RMSNorm launcher whose cluster size the patch clamps.
#include "flashinfer/comm/trtllm_allreduce.cuh"
#include "flashinfer/comm/trtllm_allreduce_fusion.cuh"

namespace ar = flashinfer::trtllm_allreduce;
namespace arf = flashinfer::trtllm_allreduce_fusion;

template __global__ void ar::reduce_fusion::lamport_style_one_shot_all_reduce_norm_kernel<
    8, __nv_bfloat16, 8, false, true, true>(ar::AllReduceParams<__nv_bfloat16>);
template cudaError_t arf::allreduce_fusion_kernel_launcher<
    arf::AllReduceFusionPattern::kARResidualRMSNorm, __nv_bfloat16, 8, false>(
    arf::AllReduceFusionParams<__nv_bfloat16> const&, bool);

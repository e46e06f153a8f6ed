// Max co-resident clusters of 1-16 CTAs of 384 threads at several shared-memory sizes (cudaOccupancyMaxActiveClusters).
// nvcc -arch=sm_90a -o occ benchmarks/cluster_occupancy.cu && ./occ   (run 20, sm90_gemm_notes.md)
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(int *p) { extern __shared__ int s[]; if (p) p[0] = s[0]; }
int main() {
  int smems[] = {100 * 1024, 200 * 1024, 227 * 1024};
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int smem : smems)
    for (int cl = 1; cl <= 16; cl *= 2) {
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = cl; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
      cfg.gridDim = dim3(132 / cl * cl); cfg.blockDim = dim3(384); cfg.dynamicSmemBytes = smem;
      cfg.attrs = attr; cfg.numAttrs = 1;
      int n = -1;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
      printf("smem %d KB cluster %2d: max active clusters %d (%d SMs) %s\n", smem / 1024, cl, n, n * cl, cudaGetErrorString(e));
    }
}

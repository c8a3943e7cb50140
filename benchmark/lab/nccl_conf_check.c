/* An NCCL program that Python never started, for benchmark/lab/nccl_conf_check.sh: a 1-rank communicator on
 * GPU 0 (ncclCommInitAll), one ncclAllReduce, then the variables named on the command line as this process
 * has them afterwards (NCCL copies its config files into the process environment when it initializes).
 * Build: nvcc -o nccl_conf_check nccl_conf_check.c -I$NCCL_HOME/include -Xlinker $NCCL_HOME/lib/libnccl.so.2
 *        -Xlinker -rpath=$NCCL_HOME/lib */
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 3; } } while (0)
#define NCCL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, ncclGetErrorString(r_)); return 4; } } while (0)

int main(int argc, char **argv) {
  enum { N = 1 << 20 };
  static float host[N];
  int dev = 0, version = 0;
  float *buf;
  ncclComm_t comm;
  cudaStream_t stream;
  for (int i = 0; i < N; i++) host[i] = 1.0f + (float)(i % 7);
  NCCL(ncclGetVersion(&version));
  printf("nccl_version %d\n", version);
  CUDA(cudaSetDevice(dev));
  CUDA(cudaMalloc((void **)&buf, sizeof host));
  CUDA(cudaMemcpy(buf, host, sizeof host, cudaMemcpyHostToDevice));
  CUDA(cudaStreamCreate(&stream));
  NCCL(ncclCommInitAll(&comm, 1, &dev));
  NCCL(ncclAllReduce(buf, buf, N, ncclFloat, ncclSum, comm, stream));
  CUDA(cudaStreamSynchronize(stream));
  CUDA(cudaMemcpy(host, buf, sizeof host, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= host[i] == 1.0f + (float)(i % 7);  /* one rank: the sum is the input */
  printf("allreduce_ok %d\n", ok);
  for (int i = 1; i < argc; i++) {
    const char *v = getenv(argv[i]);
    printf("env %s=%s\n", argv[i], v ? v : "(unset)");
  }
  NCCL(ncclCommDestroy(comm));
  CUDA(cudaFree(buf));
  return ok ? 0 : 5;
}

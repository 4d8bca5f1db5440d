// Internal to the CUDA backend: what its op files share with cuda_backend.cu. Not a public header.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/kv_cache.h"

namespace mmrt::kernels {
struct ElementwiseOps;
struct LayoutOps;
struct RopeOps;
struct LinearOps;
struct AttentionOps;
struct KvOps;
struct SamplingOps;
}  // namespace mmrt::kernels

namespace mmrt::kernels::cuda {

// Throws for a failed CUDA call, naming `what`: ResourceExhausted when out of memory, else
// Unavailable (the device or driver failed; nothing the caller sent was wrong).
void check(cudaError_t e, const char* what);
// After a kernel launch: the launch's own error, if any (execution errors surface at the next
// synchronising call).
void check_launch(const char* what);

// The stream every op of this backend runs on (`be` is a CUDA backend).
cudaStream_t stream_of(const Backend& be);
// The device's streaming multiprocessors (how many blocks a launch needs to fill it).
int sm_count(const Backend& be);

// Host step metadata (token ids, block tables, angles) in device memory: `bytes` copied into the
// backend's scratch `slot` (grown as needed) through page-locked staging, ordered on its stream
// before the ops that read it; `host` may be freed on return. Valid until the next upload into
// the same slot; bytes equal to the slot's last upload are not copied again. A Backend is driven
// by one thread.
const void* upload_scratch(const Backend& be, int slot, const void* host, size_t bytes);
// The backend's device scratch `slot` of at least `bytes` (grown as needed; ordered uses only),
// for the caller to write.
void* device_scratch(const Backend& be, int slot, size_t bytes);
constexpr int kScratchSlots = 11;
// The one slot eager steps and step graphs share (linear_cuda.cu's widened 8-bit weights).
constexpr int kSharedSlot = 4;

// cuBLAS, loaded (dlopen) when a CUDA backend is made: a process that never makes one never maps
// its libraries (linked, they added 80 ms and 215 MB to every mmrt process's start). The
// entries this backend calls, with cuBLAS 13's signatures.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  const char* (*status_string)(cublasStatus_t) = nullptr;
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t) = nullptr;
};

// The backend's cuBLAS entries and handle (bound to its stream), and a CPU backend for
// load-time host work (weight packing).
const CublasApi& cublas_api(const Backend& be);
cublasHandle_t cublas_of(const Backend& be);
const Backend& host_of(const Backend& be);

// Threads per block of the row kernels (one block per row) and of the flat ones.
constexpr int kRowThreads = 256;
constexpr int kFlatThreads = 256;

// Blocks for a grid-stride loop over n elements (at most 65535 x 8: the loop covers the rest).
inline unsigned flat_blocks(int64_t n) {
  const int64_t b = (n + kFlatThreads - 1) / kFlatThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// A grid's x dimension of `rows` blocks (one per row, tile or item); InvalidArgument naming `op`
// past what one launch takes.
unsigned row_blocks(const char* op, int64_t rows);

// ---- step graphs (cuda_backend.cu) ----
// While a step graph is captured every launch is recorded into it and signed; while one is
// replayed the ops' host code runs again without launching: uploads write the graph's metadata
// arena and every launch is signed, and the graph runs only if the signature equals the
// capture's (the same kernels, grids and arguments: pointers, sizes, scalars).
// kSizing (Backend::size_step) launches as kOff does, on the graphs' buffers and with their
// launch shapes (so that it sizes those buffers for a capture).
enum class Recording : uint8_t { kOff, kSizing, kCapture, kReplay };
Recording recording(const Backend& be);
// Adds `n` bytes to the running signature (capture and replay only).
void sign_bytes(const Backend& be, const void* p, size_t n);

// The signature of one argument: its bytes where they are its value alone, else (structs with
// padding or floats) the struct's sign_struct overload, which signs its fields one by one.
void sign_struct(const Backend& be, const KvLayerView& v);
void sign_struct(const Backend& be, const VarlenAttentionArgs& a);
template <class T>
void sign_arg(const Backend& be, const T& v) {
  if constexpr (std::is_empty_v<T>) {
    (void)be, (void)v;  // a stateless functor: the kernel's address tells it
  } else if constexpr (std::is_scalar_v<T> || std::has_unique_object_representations_v<T>) {
    sign_bytes(be, &v, sizeof v);
  } else {
    sign_struct(be, v);
  }
}
template <class... T>
void sign_args(const Backend& be, const T&... v) {
  (sign_arg(be, v), ...);
}

// Every call that puts work on the device (a launch, a cuBLAS call, an asynchronous copy) first
// signs what it would do: its `parts` (what it calls, its shape, its arguments) while a step
// graph is captured or replayed. False while one is replayed: the call is not to be made.
template <class... T>
bool sign_call(const Backend& be, const T&... parts) {
  const Recording r = recording(be);
  if (r == Recording::kCapture || r == Recording::kReplay) sign_args(be, parts...);
  return r != Recording::kReplay;
}

// Launches `kernel` on the backend's stream with `args` converted to its parameter types (signed
// as sign_call says).
template <class... P, class... A>
void launch(const Backend& be, const char* what, void (*kernel)(P...), dim3 grid, dim3 block,
            size_t smem, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch: argument count");
  const std::tuple<std::decay_t<P>...> t(std::forward<A>(args)...);
  const unsigned dims[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
  const auto run = [&](const auto&... a) {
    return sign_call(be, reinterpret_cast<const void*>(kernel), dims, smem, a...);
  };
  if (!std::apply(run, t)) return;
  std::apply([&](const auto&... a) { kernel<<<grid, block, smem, stream_of(be)>>>(a...); }, t);
  check_launch(what);
}

// One thread per element of [0, n) in a grid-stride loop (blocks from flat_blocks(n)).
#define MMRT_CUDA_FOR(i, n)                                                              \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

extern const ElementwiseOps kElementwise;  // ops_cuda.cu
extern const LayoutOps kLayout;            // layout_cuda.cu
extern const RopeOps kRope;                // rope_cuda.cu
extern const LinearOps kLinear;            // linear_cuda.cu
extern const AttentionOps kAttention;      // attention_cuda.cu
extern const KvOps kKv;                    // attention_cuda.cu
extern const SamplingOps kSampling;        // sampling_cuda.cu

}  // namespace mmrt::kernels::cuda

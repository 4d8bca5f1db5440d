// The CPU backend's KV writes and reads (layout in kernels/kv_cache.h).
#include <cstring>

#include "core/convert.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/kv_cache.h"

namespace mmrt::kernels::cpu {

void kv_write(const CpuBackend&, const KvLayerView& layer, const float* k, const float* v,
              const int32_t* slots, int64_t n, int64_t k_stride, int64_t v_stride) {
  const int64_t hk = int64_t{layer.n_kv_heads}, hd = layer.head_dim, bs = layer.block_size;
  const bool bf16 = layer.dtype == DType::kBF16;
  char* kb = static_cast<char*>(const_cast<void*>(layer.k));  // the cache's own memory
  char* vb = static_cast<char*>(const_cast<void*>(layer.v));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t blk = slots[i] / bs, off = slots[i] % bs;
    for (int64_t h = 0; h < hk; ++h) {
      const float* ks = k + i * k_stride + h * hd;    // [hd]
      const float* vs = v + i * v_stride + h * hd;    // [hd]
      const int64_t tile = (blk * hk + h) * hd * bs;  // first element of this (block, head)
      if (bf16) {
        auto* kd = reinterpret_cast<uint16_t*>(kb) + tile + off;  // column `off` of [hd, bs]
        for (int64_t d = 0; d < hd; ++d) kd[d * bs] = f32_to_bf16_scalar(ks[d]);
        f32_to_bf16(vs, reinterpret_cast<uint16_t*>(vb) + tile + off * hd, static_cast<size_t>(hd));
      } else {
        auto* kd = reinterpret_cast<float*>(kb) + tile + off;
        for (int64_t d = 0; d < hd; ++d) kd[d * bs] = ks[d];
        std::memcpy(reinterpret_cast<float*>(vb) + tile + off * hd, vs,
                    static_cast<size_t>(hd) * 4);
      }
    }
  }
}

void kv_read(const CpuBackend&, const KvLayerView& layer, const int32_t* slots, int64_t n, float* k,
             float* v) {
  const int64_t hk = int64_t{layer.n_kv_heads}, hd = layer.head_dim, bs = layer.block_size;
  const bool bf16 = layer.dtype == DType::kBF16;
  const char* kb = static_cast<const char*>(layer.k);
  const char* vb = static_cast<const char*>(layer.v);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t blk = slots[i] / bs, off = slots[i] % bs;
    for (int64_t h = 0; h < hk; ++h) {
      float* kd = k + (i * hk + h) * hd;  // [hd]
      float* vd = v + (i * hk + h) * hd;  // [hd]
      const int64_t tile = (blk * hk + h) * hd * bs;
      if (bf16) {
        const auto* ks = reinterpret_cast<const uint16_t*>(kb) + tile + off;
        for (int64_t d = 0; d < hd; ++d) kd[d] = bf16_to_f32_scalar(ks[d * bs]);
        bf16_to_f32(reinterpret_cast<const uint16_t*>(vb) + tile + off * hd, vd,
                    static_cast<size_t>(hd));
      } else {
        const auto* ks = reinterpret_cast<const float*>(kb) + tile + off;
        for (int64_t d = 0; d < hd; ++d) kd[d] = ks[d * bs];
        std::memcpy(vd, reinterpret_cast<const float*>(vb) + tile + off * hd,
                    static_cast<size_t>(hd) * 4);
      }
    }
  }
}

}  // namespace mmrt::kernels::cpu

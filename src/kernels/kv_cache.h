// Paged KV-cache storage in a backend's memory, for its attention kernels: per layer, K and V live
// in fixed-size blocks of `block_size` tokens; token slot s sits in block s / block_size at offset
// s % block_size. Block allocation, refcounts and prefix hashing belong to the engine's manager;
// this class only owns the memory (the backend's allocate()), writes new tokens through the
// backend's KvOps and describes layers to paged_attention().
//
// Layout inside one layer (chosen for the attention kernel: scores are computed 16 tokens per
// vector, and one (block, kv head) tile is one contiguous run of memory):
//   K: [num_blocks, n_kv_heads, head_dim, block_size]   (each block's K is stored transposed)
//   V: [num_blocks, n_kv_heads, block_size, head_dim]
// Element type f32 (exact) or bf16 (round-to-nearest-even on write). Each layer's K and V start
// on a 64-byte boundary; the memory is zeroed at construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "kernels/backend.h"

namespace mmrt::kernels {

struct KvCacheConfig {
  int32_t n_layers = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // tokens per block; a multiple of 16
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;        // a multiple of 16, at most 512
  DType dtype = DType::kBF16;  // kF32 or kBF16
};

// Bytes one block takes across all layers, K and V.
uint64_t kv_bytes_per_block(const KvCacheConfig& c);

// Read-only description of one layer, consumed by paged_attention().
struct KvLayerView {
  const void* k = nullptr;  // [num_blocks, n_kv_heads, head_dim, block_size]
  const void* v = nullptr;  // [num_blocks, n_kv_heads, block_size, head_dim]
  DType dtype = DType::kF32;
  int32_t num_blocks = 0, block_size = 0, n_kv_heads = 0, head_dim = 0;
};

// The device's half of the cache (a backend's table; arguments are validated by KvCache).
// k, v (rows) are device memory, slots host memory; write stores into the layer's memory, which
// the KvCache owns (its view's pointers are const only for the attention kernels).
struct KvOps {
  void (*write)(const Backend& be, const KvLayerView& layer, const float* k, const float* v,
                const int32_t* slots, int64_t n, int64_t k_stride, int64_t v_stride);
  void (*read)(const Backend& be, const KvLayerView& layer, const int32_t* slots, int64_t n,
               float* k, float* v);
};

class KvCache {
 public:
  // Memory from `be` (kept by reference: it must outlive the cache). Throws InvalidArgument for
  // a bad config, ResourceExhausted when memory runs out.
  KvCache(const Backend& be, const KvCacheConfig& config);

  const KvCacheConfig& config() const { return cfg_; }
  size_t bytes() const { return bytes_; }  // all layers, K and V
  size_t bytes_per_block() const;          // one block across all layers, K and V
  int64_t num_slots() const { return int64_t{cfg_.num_blocks} * cfg_.block_size; }

  KvLayerView layer(int32_t layer) const;

  // Stores n tokens' keys and values at `slots` (slot = block * block_size + offset).
  // k, v: [n, n_kv_heads, head_dim] f32 with token rows k_stride / v_stride floats apart
  // (0 means n_kv_heads * head_dim), e.g. the K and V parts of a fused qkv projection.
  void write(int32_t layer, const float* k, const float* v, const int32_t* slots, int64_t n,
             int64_t k_stride = 0, int64_t v_stride = 0);

  // Reads tokens back as f32 into device memory: k, v: [n, n_kv_heads, head_dim] (debugging
  // and tests).
  void read(int32_t layer, const int32_t* slots, int64_t n, float* k, float* v) const;

  // Copies block `src` onto block `dst` in every layer (copy-on-write of a shared prefix), as
  // the backend's counted device-to-device copies.
  void copy_block(int32_t src, int32_t dst);

 private:
  void check_layer(const char* fn, int32_t layer) const;
  void check_slot(const char* fn, int64_t i, int32_t slot) const;
  char* k_base(int32_t layer) const;
  char* v_base(int32_t layer) const;

  const Backend& be_;
  KvCacheConfig cfg_;
  size_t elem_ = 0;         // bytes per element
  size_t layer_bytes_ = 0;  // bytes of one layer's K (same for V)
  size_t bytes_ = 0;
  std::shared_ptr<void> mem_;
};

}  // namespace mmrt::kernels

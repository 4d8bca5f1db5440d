#include "kernels/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace mmrt::kernels {

namespace {

std::string cfg_str(const KvCacheConfig& c) {
  return "layers " + std::to_string(c.n_layers) + ", blocks " + std::to_string(c.num_blocks) +
         ", block_size " + std::to_string(c.block_size) + ", kv heads " +
         std::to_string(c.n_kv_heads) + ", head_dim " + std::to_string(c.head_dim);
}

}  // namespace

uint64_t kv_bytes_per_block(const KvCacheConfig& c) {
  return 2ull * static_cast<uint64_t>(std::max(c.n_layers, 0)) *
         static_cast<uint64_t>(std::max(c.block_size, 0)) *
         static_cast<uint64_t>(std::max(c.n_kv_heads, 0)) *
         static_cast<uint64_t>(std::max(c.head_dim, 0)) * dtype_size(c.dtype);
}

KvCache::KvCache(const Backend& be, const KvCacheConfig& config) : be_(be), cfg_(config) {
  const auto& c = cfg_;
  if (c.n_layers < 1 || c.num_blocks < 1 || c.n_kv_heads < 1)
    throw InvalidArgument("KvCache: layers, blocks and kv heads must be >= 1 (" + cfg_str(c) + ")");
  if (c.block_size < 16 || c.block_size % 16 != 0 || c.block_size > 4096)
    throw InvalidArgument("KvCache: block_size must be a multiple of 16 in [16, 4096], got " +
                          std::to_string(c.block_size));
  if (c.head_dim < 16 || c.head_dim % 16 != 0 || c.head_dim > 512)
    throw InvalidArgument("KvCache: head_dim must be a multiple of 16 in [16, 512], got " +
                          std::to_string(c.head_dim));
  if (c.dtype != DType::kF32 && c.dtype != DType::kBF16)
    throw InvalidArgument("KvCache: dtype must be F32 or BF16, got " +
                          std::string(dtype_name(c.dtype)));
  elem_ = dtype_size(c.dtype);
  const size_t per_block =
      static_cast<size_t>(c.block_size) * static_cast<size_t>(c.n_kv_heads) * c.head_dim * elem_;
  layer_bytes_ = per_block * static_cast<size_t>(c.num_blocks);  // multiple of 512 bytes
  bytes_ = layer_bytes_ * 2 * static_cast<size_t>(c.n_layers);
  mem_ = be.allocate(bytes_, /*zero=*/true);
}

size_t KvCache::bytes_per_block() const {
  return bytes_ / static_cast<size_t>(cfg_.num_blocks);
}

char* KvCache::k_base(int32_t layer) const {
  return static_cast<char*>(mem_.get()) + layer_bytes_ * 2 * static_cast<size_t>(layer);
}
char* KvCache::v_base(int32_t layer) const {
  return k_base(layer) + layer_bytes_;
}

void KvCache::check_layer(const char* fn, int32_t layer) const {
  if (layer < 0 || layer >= cfg_.n_layers)
    throw InvalidArgument(std::string("KvCache::") + fn + ": layer " + std::to_string(layer) +
                          " outside [0, " + std::to_string(cfg_.n_layers) + ")");
}

void KvCache::check_slot(const char* fn, int64_t i, int32_t slot) const {
  if (slot < 0 || slot >= num_slots())
    throw InvalidArgument(std::string("KvCache::") + fn + ": slot " + std::to_string(slot) +
                          " (token " + std::to_string(i) + ") outside [0, " +
                          std::to_string(num_slots()) + ")");
}

KvLayerView KvCache::layer(int32_t layer) const {
  check_layer("layer", layer);
  return KvLayerView{k_base(layer),   v_base(layer),   cfg_.dtype,   cfg_.num_blocks,
                     cfg_.block_size, cfg_.n_kv_heads, cfg_.head_dim};
}

void KvCache::write(int32_t layer, const float* k, const float* v, const int32_t* slots, int64_t n,
                    int64_t k_stride, int64_t v_stride) {
  check_layer("write", layer);
  const int64_t hk = int64_t{cfg_.n_kv_heads}, hd = cfg_.head_dim;
  if (n < 0) throw InvalidArgument("KvCache::write: negative token count");
  if (n == 0) return;
  if (!k || !v || !slots) throw InvalidArgument("KvCache::write: null pointer");
  if (k_stride == 0) k_stride = hk * hd;
  if (v_stride == 0) v_stride = hk * hd;
  if (k_stride < hk * hd || v_stride < hk * hd)
    throw InvalidArgument("KvCache::write: row stride smaller than n_kv_heads * head_dim");
  for (int64_t i = 0; i < n; ++i) check_slot("write", i, slots[i]);
  detail::entry(be_, be_.ops().kv, &KvOps::write, Op::kKvWrite)(be_, this->layer(layer), k, v,
                                                                slots, n, k_stride, v_stride);
}

void KvCache::read(int32_t layer, const int32_t* slots, int64_t n, float* k, float* v) const {
  check_layer("read", layer);
  if (n < 0) throw InvalidArgument("KvCache::read: negative token count");
  if (n == 0) return;
  if (!k || !v || !slots) throw InvalidArgument("KvCache::read: null pointer");
  for (int64_t i = 0; i < n; ++i) check_slot("read", i, slots[i]);
  detail::entry(be_, be_.ops().kv, &KvOps::read, Op::kKvRead)(be_, this->layer(layer), slots, n, k,
                                                              v);
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  if (src < 0 || src >= cfg_.num_blocks || dst < 0 || dst >= cfg_.num_blocks)
    throw InvalidArgument("KvCache::copy_block: block " + std::to_string(src) + " -> " +
                          std::to_string(dst) + " outside [0, " + std::to_string(cfg_.num_blocks) +
                          ")");
  if (src == dst) return;
  const size_t blk = layer_bytes_ / static_cast<size_t>(cfg_.num_blocks);
  for (int32_t l = 0; l < cfg_.n_layers; ++l) {
    be_.copy_on_device(k_base(l) + blk * size_t(dst), k_base(l) + blk * size_t(src), blk);
    be_.copy_on_device(v_base(l) + blk * size_t(dst), v_base(l) + blk * size_t(src), blk);
  }
}

}  // namespace mmrt::kernels

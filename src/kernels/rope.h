// Rotary position embeddings (an op family: RopeOps) in the Hugging Face "rotate_half" (NeoX) form:
// within each head, dimension j pairs with j + head_dim/2 and both rotate by the angle
// pos[component(j)] * inv_freq[j]. One table type covers plain 1-D RoPE, Qwen2-VL M-RoPE (t/h/w
// sections) and the Qwen2-VL vision 2-D rotary (row/col); one kernel applies them all. Angles and
// cos/sin are computed in fp32 exactly as HF does (freqs = pos * inv_freq).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace mmrt::kernels {

struct RopeTable {
  int32_t head_dim = 0;
  int32_t n_components = 1;        // rows of the position array (1, 2 or 3)
  std::vector<float> inv_freq;     // [head_dim / 2]
  std::vector<int32_t> component;  // [head_dim / 2], which position row drives pair j
};

// Plain RoPE: inv_freq[j] = theta^(-2j/head_dim), one position row.
RopeTable make_rope_table(int32_t head_dim, double theta);
// Qwen2-VL M-RoPE: sections (e.g. {16, 24, 24}, summing to head_dim/2) are contiguous runs of
// pairs driven by the t, h and w position rows in order; inv_freq as in plain RoPE.
RopeTable make_mrope_table(int32_t head_dim, double theta, std::span<const int32_t> mrope_section);
// Qwen2-VL vision 2-D rotary: pairs j < head_dim/4 use the row position with
// inv_freq[j] = theta^(-2j/(head_dim/2)); pairs j >= head_dim/4 use the column position with
// inv_freq[j - head_dim/4]. Position rows: 0 = row, 1 = column.
RopeTable make_vision_rope_table(int32_t head_dim, double theta = 10000.0);

// cos/sin of the angles of n_tokens tokens, shared by every head and layer of one step.
struct RopeAngles {
  int32_t head_dim = 0;
  int64_t n_tokens = 0;
  std::vector<float> cos;  // [n_tokens, head_dim / 2]
  std::vector<float> sin;  // [n_tokens, head_dim / 2]
};

// pos: [table.n_components, n_tokens] int32 (row c holds component c for every token).
RopeAngles rope_angles(const Backend& be, const RopeTable& table, const int32_t* pos,
                       int64_t n_tokens);

// Rotates x in place: x is [n_tokens, n_heads, head_stride] with token rows `row_stride` floats
// apart (0 means n_heads * head_stride), so q or k inside a fused qkv row can be rotated
// directly. The first angles.head_dim dims of each head are rotated; head_stride (0 means
// angles.head_dim) larger than that is partial rotary: the remaining dims pass through.
void apply_rope(const Backend& be, const RopeAngles& angles, float* x, int64_t n_heads,
                int64_t row_stride = 0, int64_t head_stride = 0);

// Convenience: rope_angles + apply_rope.
void apply_rope(const Backend& be, const RopeTable& table, const int32_t* pos, int64_t n_tokens,
                float* x, int64_t n_heads, int64_t row_stride = 0);

// Which CPU kernels apply_rope uses at most `cap`: "avx512", "avx2" or "scalar".
const char* rope_isa(Isa cap);

namespace detail {
// For every device's rope_angles (the angles are host memory): a RopeAngles sized for n_tokens
// of `table`, and the rows of tokens [t0, t1) computed into it as HF does (fp32 pos * inv_freq,
// then cos and sin).
RopeAngles sized_rope_angles(const RopeTable& table, int64_t n_tokens);
void rope_angle_rows(const RopeTable& table, const int32_t* pos, int64_t n_tokens, int64_t t0,
                     int64_t t1, RopeAngles& a);
}  // namespace detail

// A device's rotary kernels (arguments as above). The angles are host memory (step metadata,
// as positions are): a device's rotation reads them as it needs.
struct RopeOps {
  RopeAngles (*rope_angles)(const Backend&, const RopeTable& table, const int32_t* pos,
                            int64_t n_tokens);
  void (*apply_rope)(const Backend&, const RopeAngles& angles, float* x, int64_t n_heads,
                     int64_t row_stride, int64_t head_stride);
};

}  // namespace mmrt::kernels

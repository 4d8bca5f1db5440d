// Rotary tables and angles (host math, every device) and the dispatchers of the rotary ops, with
// the argument checks every device shares.
#include "kernels/rope.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace mmrt::kernels {

namespace {

// HF: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)), every step in fp32.
float hf_inv_freq(int32_t j, int32_t dim, double theta) {
  const float e = static_cast<float>(2 * j) / static_cast<float>(dim);
  const float p = std::pow(static_cast<float>(theta), e);
  return 1.0f / p;
}

void check_head_dim(const char* fn, int32_t head_dim, int32_t multiple) {
  if (head_dim <= 0 || head_dim % multiple != 0)
    throw InvalidArgument(std::string(fn) + ": head_dim " + std::to_string(head_dim) +
                          " must be a positive multiple of " + std::to_string(multiple));
}

void check_theta(const char* fn, double theta) {
  if (!(theta > 1.0) || !std::isfinite(theta))
    throw InvalidArgument(std::string(fn) + ": theta must be finite and > 1, got " +
                          std::to_string(theta));
}

}  // namespace

RopeTable make_rope_table(int32_t head_dim, double theta) {
  check_head_dim("make_rope_table", head_dim, 2);
  check_theta("make_rope_table", theta);
  RopeTable t;
  t.head_dim = head_dim;
  t.n_components = 1;
  const int32_t half = head_dim / 2;
  for (int32_t j = 0; j < half; ++j) t.inv_freq.push_back(hf_inv_freq(j, head_dim, theta));
  t.component.assign(static_cast<size_t>(half), 0);
  return t;
}

RopeTable make_mrope_table(int32_t head_dim, double theta, std::span<const int32_t> mrope_section) {
  RopeTable t = make_rope_table(head_dim, theta);
  if (mrope_section.empty() || mrope_section.size() > 4)
    throw InvalidArgument("make_mrope_table: expected 1 to 4 sections, got " +
                          std::to_string(mrope_section.size()));
  int64_t total = 0;
  for (int32_t s : mrope_section) {
    if (s < 0) throw InvalidArgument("make_mrope_table: negative section size");
    total += s;
  }
  if (total != head_dim / 2)
    throw InvalidArgument("make_mrope_table: sections sum to " + std::to_string(total) +
                          ", expected head_dim/2 = " + std::to_string(head_dim / 2));
  t.n_components = static_cast<int32_t>(mrope_section.size());
  size_t j = 0;
  for (size_t c = 0; c < mrope_section.size(); ++c)
    for (int32_t k = 0; k < mrope_section[c]; ++k) t.component[j++] = static_cast<int32_t>(c);
  return t;
}

RopeTable make_vision_rope_table(int32_t head_dim, double theta) {
  check_head_dim("make_vision_rope_table", head_dim, 4);
  check_theta("make_vision_rope_table", theta);
  RopeTable t;
  t.head_dim = head_dim;
  t.n_components = 2;
  const int32_t quarter = head_dim / 4;
  for (int32_t j = 0; j < 2 * quarter; ++j) {
    const int32_t k = j < quarter ? j : j - quarter;
    t.inv_freq.push_back(hf_inv_freq(k, head_dim / 2, theta));
    t.component.push_back(j < quarter ? 0 : 1);
  }
  return t;
}

namespace detail {

RopeAngles sized_rope_angles(const RopeTable& table, int64_t n_tokens) {
  RopeAngles a;
  a.head_dim = table.head_dim;
  a.n_tokens = n_tokens;
  const int64_t half = table.head_dim / 2;
  a.cos.resize(static_cast<size_t>(n_tokens * half));
  a.sin.resize(static_cast<size_t>(n_tokens * half));
  return a;
}

void rope_angle_rows(const RopeTable& table, const int32_t* pos, int64_t n_tokens, int64_t t0,
                     int64_t t1, RopeAngles& a) {
  const int32_t half = table.head_dim / 2;
  for (int64_t t = t0; t < t1; ++t) {
    float* c = a.cos.data() + t * half;  // [half]
    float* s = a.sin.data() + t * half;  // [half]
    for (int32_t j = 0; j < half; ++j) {
      const float p = static_cast<float>(pos[table.component[j] * n_tokens + t]);
      const float ang = p * table.inv_freq[j];
      c[j] = std::cos(ang);
      s[j] = std::sin(ang);
    }
  }
}

}  // namespace detail

RopeAngles rope_angles(const Backend& be, const RopeTable& table, const int32_t* pos,
                       int64_t n_tokens) {
  const auto fn = detail::entry(be, be.ops().rope, &RopeOps::rope_angles, Op::kRopeAngles);
  const int32_t half = table.head_dim / 2;
  if (table.head_dim <= 0 || table.head_dim % 2 || table.inv_freq.size() != size_t(half) ||
      table.component.size() != size_t(half) || table.n_components < 1)
    throw InvalidArgument("rope_angles: malformed RopeTable (head_dim " +
                          std::to_string(table.head_dim) + ")");
  for (int32_t c : table.component)
    if (c < 0 || c >= table.n_components)
      throw InvalidArgument("rope_angles: RopeTable component " + std::to_string(c) +
                            " outside [0, " + std::to_string(table.n_components) + ")");
  if (n_tokens < 0) throw InvalidArgument("rope_angles: negative token count");
  if (n_tokens > 0 && !pos) throw InvalidArgument("rope_angles: null positions");
  return fn(be, table, pos, n_tokens);
}

void apply_rope(const Backend& be, const RopeAngles& angles, float* x, int64_t n_heads,
                int64_t row_stride, int64_t head_stride) {
  const auto fn = detail::entry(be, be.ops().rope, &RopeOps::apply_rope, Op::kApplyRope);
  const int64_t hd = angles.head_dim, half = hd / 2, n = angles.n_tokens;
  if (hd <= 0 || hd % 2 || angles.cos.size() != size_t(n * half) ||
      angles.sin.size() != size_t(n * half))
    throw InvalidArgument("apply_rope: malformed RopeAngles");
  if (n_heads < 1) throw InvalidArgument("apply_rope: n_heads must be >= 1");
  if (head_stride == 0) head_stride = hd;
  if (head_stride < hd)
    throw InvalidArgument("apply_rope: head_stride " + std::to_string(head_stride) +
                          " smaller than the rotated dims " + std::to_string(hd));
  if (row_stride == 0) row_stride = n_heads * head_stride;
  if (row_stride < n_heads * head_stride)
    throw InvalidArgument("apply_rope: row_stride " + std::to_string(row_stride) +
                          " smaller than n_heads * head_stride " +
                          std::to_string(n_heads * head_stride));
  if (n > 0 && !x) throw InvalidArgument("apply_rope: null input");
  if (n == 0) return;
  fn(be, angles, x, n_heads, row_stride, head_stride);
}

void apply_rope(const Backend& be, const RopeTable& table, const int32_t* pos, int64_t n_tokens,
                float* x, int64_t n_heads, int64_t row_stride) {
  apply_rope(be, rope_angles(be, table, pos, n_tokens), x, n_heads, row_stride);
}

}  // namespace mmrt::kernels

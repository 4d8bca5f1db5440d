#include "models/qwen2_vl/processor.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace mmrt::models {

MultimodalPrompt expand_image_prompt(std::span<const int32_t> ids, std::span<const GridThw> grids,
                                     const io::Qwen2VLConfig& cfg) {
  const int64_t ms = cfg.vision.spatial_merge_size;
  const int32_t pad = static_cast<int32_t>(cfg.image_token_id);
  MultimodalPrompt p;
  size_t img = 0;
  for (int32_t t : ids) {
    if (t != pad) {
      p.ids.push_back(t);
      continue;
    }
    if (img >= grids.size())
      throw InvalidArgument("prompt has more image placeholders than images (" +
                            std::to_string(grids.size()) + " given)");
    const GridThw& g = grids[img++];
    int64_t n = g[0] * (g[1] / ms) * (g[2] / ms);
    p.images.push_back({static_cast<int64_t>(p.ids.size()), n});
    p.ids.insert(p.ids.end(), static_cast<size_t>(n), pad);
  }
  if (img != grids.size())
    throw InvalidArgument("prompt has " + std::to_string(img) + " image placeholders but " +
                          std::to_string(grids.size()) + " images were given");
  qwen2_vl_rope_index(p.ids, grids, cfg, p.positions, p.rope_delta);
  return p;
}

void qwen2_vl_rope_index(std::span<const int32_t> ids, std::span<const GridThw> grids,
                         const io::Qwen2VLConfig& cfg, std::vector<int32_t>& positions,
                         int32_t& rope_delta) {
  const int64_t S = static_cast<int64_t>(ids.size());
  const int64_t ms = cfg.vision.spatial_merge_size;
  const int32_t pad = static_cast<int32_t>(cfg.image_token_id);
  positions.assign(static_cast<size_t>(3 * S), 0);
  auto set = [&](int64_t i, int64_t t, int64_t h, int64_t w) {
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(t);
    positions[static_cast<size_t>(S + i)] = static_cast<int32_t>(h);
    positions[static_cast<size_t>(2 * S + i)] = static_cast<int32_t>(w);
  };
  int64_t next = 0;  // max position so far + 1
  size_t img = 0;
  int64_t i = 0;
  while (i < S) {
    if (ids[static_cast<size_t>(i)] != pad) {
      set(i, next, next, next);
      ++next;
      ++i;
      continue;
    }
    if (img >= grids.size())
      throw InvalidArgument("image pad tokens at position " + std::to_string(i) + " have no image grid");
    const GridThw& g = grids[img++];
    const int64_t gt = g[0], gh = g[1] / ms, gw = g[2] / ms, n = gt * gh * gw;
    if (i + n > S)
      throw InvalidArgument("image " + std::to_string(img - 1) + " needs " + std::to_string(n) +
                            " pad tokens, the prompt ends after " + std::to_string(S - i));
    int64_t mx = 0;
    for (int64_t t = 0; t < gt; ++t)
      for (int64_t h = 0; h < gh; ++h)
        for (int64_t w = 0; w < gw; ++w) {
          set(i++, next + t, next + h, next + w);
          mx = std::max({mx, t, h, w});
        }
    next += mx + 1;
  }
  rope_delta = static_cast<int32_t>(next - S);
}

}  // namespace mmrt::models

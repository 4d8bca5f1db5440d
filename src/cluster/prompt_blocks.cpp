#include "cluster/prompt_blocks.h"

#include <nlohmann/json.hpp>

#include "cluster/ttft_quote.h"
#include "engine/kv_manager.h"
#include "io/tokenizer.h"
#include "models/registry.h"
#include "server/api.h"
#include "server/tenants.h"

namespace mmrt::cluster {

struct PromptBlocks::Impl {
  io::Tokenizer tok;
  std::unique_ptr<models::Processor> processor;
  const ClassBook& book;
};

PromptBlocks::PromptBlocks(const std::string& model_dir, const ClassBook& book)
    : impl_(new Impl{models::load_tokenizer(model_dir), models::load_processor(model_dir), book}) {}

PromptBlocks::~PromptBlocks() = default;

std::optional<PromptLayout> PromptBlocks::layout(std::string_view path, const nlohmann::json& body,
                                                 const std::string* authorization) const {
  const Impl& m = *impl_;
  const server::Tenant* tenant = m.book.tenant(authorization);
  if (!tenant || body.is_discarded()) return std::nullopt;  // the worker answers 401 / 400
  try {
    server::ParsedRequest p = server::parse_request_json(
        body, path == "/v1/completions" ? server::Endpoint::kCompletion : server::Endpoint::kChat,
        m.book.api());
    engine::GenerateRequest& g = p.request;
    if (!p.fetches.empty() || !g.resume_ids.empty()) return std::nullopt;
    // As the engine's media stage prepares a prompt (engine/media_stage.cpp).
    PromptLayout out;
    if (!g.prompt_ids.empty()) {
      if (!g.media.empty()) return std::nullopt;
      out.ids = std::move(g.prompt_ids);
    } else if (!g.prompt_text.empty()) {
      if (!g.media.empty()) return std::nullopt;
      out.ids = m.tok.encode(g.prompt_text);
    } else {
      out.ids = m.processor->chat_ids(m.tok, g.messages);
    }
    out.salt = engine::tenant_salt(tenant->name);
    std::vector<models::PreparedMedia> shells;
    for (const engine::PendingMedia& pm : g.media) {
      const models::MediaEstimate e = m.processor->estimate(pm.modality, pm.bytes, pm.options);
      if (!e.exact) return std::nullopt;
      shells.push_back(models::layout_shell(pm.modality, e));
      out.items.push_back(
          {m.processor->content_key(pm.modality, pm.bytes, pm.options), 0, 0, e.encoder_cost});
      out.files.push_back(hash128(pm.bytes.data(), pm.bytes.size()));
    }
    if (!shells.empty()) {
      models::ExpandedPrompt e = m.processor->expand(out.ids, shells);
      if (e.spans.size() != out.items.size()) return std::nullopt;
      out.ids = std::move(e.ids);
      for (size_t i = 0; i < out.items.size(); ++i) {
        out.items[i].begin = e.spans[i].begin;
        out.items[i].n_tokens = e.spans[i].n_tokens;
      }
    }
    return out;
  } catch (const std::exception&) {
    return std::nullopt;  // the worker will say what is wrong with it
  }
}

std::vector<Hash128> prompt_chain(const PromptLayout& layout, int64_t block_size,
                                  std::string_view encoder) {
  std::vector<Hash128> keys;
  if (block_size <= 0 || layout.ids.empty()) return keys;
  std::vector<engine::MediaItem> items(layout.items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].key = engine::media_cache_key(layout.items[i].content, layout.salt, encoder);
    items[i].begin = layout.items[i].begin;
    items[i].n_tokens = layout.items[i].n_tokens;
  }
  const int64_t usable = (static_cast<int64_t>(layout.ids.size()) - 1) / block_size;
  Hash128 parent = layout.salt;
  for (int64_t j = 0; j < usable; ++j) {
    parent = engine::prefix_block_hash(
        parent, j * block_size, block_size,
        [&](int64_t i) { return layout.ids[static_cast<size_t>(i)]; }, items);
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace mmrt::cluster

#include "cluster/prompt_blocks.h"

#include <nlohmann/json.hpp>

#include "engine/kv_manager.h"
#include "engine/sla.h"
#include "io/tokenizer.h"
#include "models/registry.h"
#include "server/api.h"
#include "server/tenants.h"

namespace mmrt::cluster {

struct PromptBlocks::Impl {
  io::Tokenizer tok;
  std::unique_ptr<models::Processor> processor;
  engine::SlaConfig sla;
  server::ApiOptions api;
  std::unique_ptr<server::Tenants> tenants;
};

PromptBlocks::PromptBlocks(const std::string& model_dir, const std::string& model_id,
                           const std::string& api_keys_file, const std::string& sla_file)
    : impl_(new Impl{
          models::load_tokenizer(model_dir),
          models::load_processor(model_dir),
          sla_file.empty() ? engine::SlaConfig::defaults() : engine::SlaConfig::load(sla_file),
          {},
          nullptr}) {
  Impl& m = *impl_;
  m.api.model_id = model_id;
  m.api.sla = &m.sla;
  m.api.tiers = server::default_tiers();
  m.tenants = api_keys_file.empty() ? std::make_unique<server::Tenants>()
                                    : server::Tenants::load(api_keys_file, m.sla);
}

PromptBlocks::~PromptBlocks() = default;

std::optional<PromptLayout> PromptBlocks::layout(std::string_view path, const nlohmann::json& body,
                                                 const std::string* authorization) const {
  const Impl& m = *impl_;
  const server::Tenant* tenant = m.tenants->authenticate(authorization);
  if (!tenant || body.is_discarded()) return std::nullopt;  // the worker answers 401 / 400
  try {
    server::ParsedRequest p = server::parse_request_json(
        body, path == "/v1/completions" ? server::Endpoint::kCompletion : server::Endpoint::kChat,
        m.api);
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
      out.items.push_back({m.processor->content_key(pm.modality, pm.bytes, pm.options)});
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

#include "cluster/prompt_blocks.h"

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

PromptChain PromptBlocks::chain(std::string_view path, std::string_view body,
                                const std::string* authorization, int64_t block_size,
                                std::string_view encoder) const {
  const Impl& m = *impl_;
  PromptChain out;
  if (block_size <= 0) return out;
  const server::Tenant* tenant = m.tenants->authenticate(authorization);
  if (!tenant) return out;  // the worker answers 401
  try {
    server::ParsedRequest p = server::parse_request(
        body, path == "/v1/completions" ? server::Endpoint::kCompletion : server::Endpoint::kChat,
        m.api);
    engine::GenerateRequest& g = p.request;
    if (!p.fetches.empty() || !g.resume_ids.empty()) return out;
    // As the engine's media stage prepares a prompt (engine/media_stage.cpp).
    std::vector<int32_t> ids;
    if (!g.prompt_ids.empty()) {
      if (!g.media.empty()) return out;
      ids = std::move(g.prompt_ids);
    } else if (!g.prompt_text.empty()) {
      if (!g.media.empty()) return out;
      ids = m.tok.encode(g.prompt_text);
    } else {
      ids = m.processor->chat_ids(m.tok, g.messages);
    }
    const Hash128 salt = engine::tenant_salt(tenant->name);
    std::vector<models::PreparedMedia> shells;
    std::vector<engine::MediaItem> items;
    for (const engine::PendingMedia& pm : g.media) {
      const models::MediaEstimate e = m.processor->estimate(pm.modality, pm.bytes, pm.options);
      if (!e.exact) return out;
      models::PreparedMedia shell;
      shell.modality = pm.modality;
      shell.dims = e.dims;
      shell.n_tokens = e.n_tokens;
      shell.encoder_cost = e.encoder_cost;
      shell.slice_seconds = e.slice_seconds;
      shells.push_back(std::move(shell));
      engine::MediaItem item;
      item.key = engine::media_cache_key(
          m.processor->content_key(pm.modality, pm.bytes, pm.options), salt, encoder);
      items.push_back(std::move(item));
    }
    if (!shells.empty()) {
      models::ExpandedPrompt e = m.processor->expand(ids, shells);
      if (e.spans.size() != items.size()) return out;
      ids = std::move(e.ids);
      for (size_t i = 0; i < items.size(); ++i) {
        items[i].begin = e.spans[i].begin;
        items[i].n_tokens = e.spans[i].n_tokens;
      }
    }
    out.prompt_tokens = static_cast<int64_t>(ids.size());
    // The blocks the engine would look up: it always leaves one token to compute.
    const int64_t usable = (out.prompt_tokens - 1) / block_size;
    Hash128 parent = salt;
    for (int64_t j = 0; j < usable; ++j) {
      parent = engine::prefix_block_hash(
          parent, j * block_size, block_size,
          [&](int64_t i) { return ids[static_cast<size_t>(i)]; }, items);
      out.keys.push_back(parent);
    }
  } catch (const std::exception&) {
    return {};  // the worker will say what is wrong with it
  }
  return out;
}

}  // namespace mmrt::cluster

// A request's prompt as a worker's engine will lay it out, computed by the router: the chat
// template and tokens (the checkpoint's tokenizer and processor, no weights), each inline
// media item placed from its header (Processor::estimate, as the engine lays a prompt out before
// any pixel is decoded), media keys with the tenant's salt and the worker's encoder precision,
// and the chain of prefix-cache block keys (engine/kv_manager.h's functions, the same code the
// workers key their caches with). Matched against the keys each worker publishes over NATS
// (cluster/cache_events.h, topic kv), it tells the router how many of a prompt's tokens a
// worker would not prefill: Dynamo's KV-aware routing, with media content in the block chain.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"

namespace mmrt::cluster {

// A request's prompt laid out: its token ids (placeholders expanded), where each inline media
// item sits and its content key (before the tenant's salt and the encoder's precision), and the
// hashes of the media files' bytes (what the workers' encoder-cache events name).
struct PromptLayout {
  struct Item {
    Hash128 content;
    int64_t begin = 0, n_tokens = 0;
    int64_t encoder_cost = 0;  // encoder work (vision patches), as the header gives it
  };
  std::vector<int32_t> ids;
  std::vector<Item> items;
  Hash128 salt;  // the tenant's
  std::vector<Hash128> files;
};

class ClassBook;

class PromptBlocks {
 public:
  // Loads the tokenizer and processor of the checkpoint in `model_dir` (FormatError / NotFound
  // as `mmrt serve` would give them). `book`: the workers' keys, so that a key's tenant (the
  // salt of its cache keys) is known here, and the API options requests are parsed with
  // (cluster/ttft_quote.h); it outlives this.
  PromptBlocks(const std::string& model_dir, const ClassBook& book);
  ~PromptBlocks();

  // `body` as routing.h's parse_body gave it. Nothing when the router cannot know the layout: a
  // body the worker will refuse, an unknown key, media behind a URL (fetched by the worker), a
  // resumed stream, media whose header does not fix its token count (a video with pruning, an
  // audio file of unknown length).
  std::optional<PromptLayout> layout(std::string_view path, const nlohmann::json& body,
                                     const std::string* authorization) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The prefix-cache keys of the layout's full blocks, as a worker of `block_size` tokens per block
// and encoder precision `encoder` keys them (the blocks its engine would look up: one token is
// always left to compute).
std::vector<Hash128> prompt_chain(const PromptLayout& layout, int64_t block_size,
                                  std::string_view encoder);

}  // namespace mmrt::cluster

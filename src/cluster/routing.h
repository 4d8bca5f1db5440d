// How the router picks a worker for a request (plain functions: unit-tested apart from any
// process). A request's affinity key names the conversation it belongs to: the tenant, the model
// and, for a chat, its messages up to and including the first user message (its system prompt,
// first question and first images: the prefix every later turn repeats); for a completion, the
// start of its prompt. Workers are tried in rendezvous order for that key (highest
// hash(key, worker id) first): every turn of a conversation goes where its prefix and images are
// cached, keys spread evenly, and a worker leaving moves only its own keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/prompt_blocks.h"
#include "cluster/worker_info.h"
#include "core/hash.h"

namespace mmrt::cluster {

// A request body parsed as the server parses one (io::parse_json's depth bound and the API's
// bound on values, kMaxBodyJsonValues), discarded when it is not JSON or over a bound: the
// worker then answers it with the reason.
nlohmann::json parse_body(std::string_view body);

// `path` /v1/chat/completions or /v1/completions; `tenant` the Authorization header ("" none).
// A body that is not JSON hashes as its first 4 KiB (the worker will refuse it anyway).
uint64_t affinity_key(std::string_view path, std::string_view body, std::string_view tenant);
// The same with the body already parsed (`parsed` discarded when it is not JSON).
uint64_t affinity_key(std::string_view path, const nlohmann::json& parsed, std::string_view body,
                      std::string_view tenant);

// The hashes of the media files a request carries inline (data: URLs of image_url, video_url and
// audio_url parts, input_audio data), as the engine hashes them for its encoder cache's
// listener (the decoded bytes): at most 16, each at most `max_bytes`; a part that does not
// decode is passed over (the worker will say what is wrong with it).
std::vector<Hash128> media_files(const nlohmann::json& parsed, uint64_t max_bytes = 64 << 20);

// Media affinity: the first worker in `order` holding the most of a request's media files
// (`held[i]`: how many worker i's encoder cache holds) moves to the front when the front holds
// fewer. True when it moved one.
bool media_order(std::vector<size_t>& order, const std::vector<int64_t>& held);

// Dynamo's KV-aware choice: worker i costs `weight` x the blocks of the request's prompt it would
// prefill (`fresh[i]`: those past the longest prefix of the request's block chain its prefix
// cache holds; -1 when its cache is not known: all `total` of them) + the KV blocks its running
// requests hold (`active[i]`, its decode load). `order` is sorted by cost, ties keeping their
// place. Only when some worker holds a block of the request: with none, the affinity order
// stands (it spreads new conversations evenly and keeps them where their next turn will find
// them). True when the front changed.
bool kv_order(std::vector<size_t>& order, const std::vector<int64_t>& fresh,
              const std::vector<int64_t>& active, int64_t total, double weight);

// KV-aware routing for a request laid out by the router (cluster/prompt_blocks.h): each worker's
// chain of block keys (one per block size and encoder precision among `workers`), how many of
// them it holds (`held(id, chain)`: -1 when its cache is not known), the blocks its requests in
// flight hold (`active(id)`), then kv_order. `cached[i]`: the prompt tokens worker i would find
// cached (-1: not known); `ordered`: some worker held a block and `order` is by cost; `moved`:
// that changed the front.
struct KvChoice {
  bool ordered = false, moved = false;
  std::vector<int64_t> cached;
};
KvChoice kv_choice(const PromptLayout& layout, const std::vector<WorkerInfo>& workers,
                   std::vector<size_t>& order,
                   const std::function<int64_t(const std::string&, std::span<const Hash128>)>& held,
                   const std::function<int64_t(const std::string&)>& active, double weight);

// Indices of `workers`, in the order to try them for `key`.
std::vector<size_t> rendezvous_order(uint64_t key, const std::vector<WorkerInfo>& workers);

// The load override (sgl-router's rule, with thresholds for CPU-sized workers): when the first
// worker in `order` carries `abs` more requests (running + waiting) than the least loaded one
// and over `rel` times its load, that one moves to the front. `load[i]` is worker i's load,
// -1 when unknown (no fresh gauge): unknown workers are neither moved nor compared. True when
// it moved one.
bool balance_order(std::vector<size_t>& order, const std::vector<int64_t>& load, int64_t abs,
                   double rel);

}  // namespace mmrt::cluster

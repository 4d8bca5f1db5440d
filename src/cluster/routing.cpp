#include "cluster/routing.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "io/json_fields.h"
#include "server/api.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {
constexpr size_t kRawPrefix = 4096;
constexpr size_t kPromptPrefix = 2048;

// Feeds a JSON value to `h` as it is, without writing it out (a message's data: URL of an image
// is most of a request's bytes): each value's type tag, then its content; objects in key order.
void hash_json(Hasher& h, const json& v) {
  const auto tag = static_cast<uint8_t>(v.type());
  h.update_pod(tag);
  switch (v.type()) {
    case json::value_t::object:
      h.update_pod(static_cast<uint64_t>(v.size()));
      for (auto it = v.begin(); it != v.end(); ++it) {
        h.update_pod(static_cast<uint64_t>(it.key().size())).update(it.key());
        hash_json(h, it.value());
      }
      break;
    case json::value_t::array:
      h.update_pod(static_cast<uint64_t>(v.size()));
      for (const json& e : v) hash_json(h, e);
      break;
    case json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      h.update_pod(static_cast<uint64_t>(s.size())).update(s);
      break;
    }
    default: {
      const std::string s = v.dump();  // a number, a boolean, null: a few bytes
      h.update(s);
    }
  }
}

}  // namespace

json parse_body(std::string_view body) {
  return io::parse_json_or_discard(body, server::kMaxBodyJsonValues);
}

uint64_t affinity_key(std::string_view path, std::string_view body, std::string_view tenant) {
  return affinity_key(path, parse_body(body), body, tenant);
}

uint64_t affinity_key(std::string_view path, const json& j, std::string_view body,
                      std::string_view tenant) {
  Hasher h;
  h.update(tenant).update(std::string_view("\0", 1)).update(path);
  if (j.is_discarded() || !j.is_object()) {
    h.update(body.substr(0, kRawPrefix));
    return h.digest().lo;
  }
  if (auto m = j.find("model"); m != j.end() && m->is_string())
    h.update(m->get_ref<const std::string&>());
  if (auto msgs = j.find("messages"); msgs != j.end() && msgs->is_array()) {
    for (const json& msg : *msgs) {
      hash_json(h, msg);
      if (msg.is_object() && msg.value("role", std::string()) == "user") break;
    }
  } else if (auto p = j.find("prompt"); p != j.end()) {
    const std::string s = p->dump();
    h.update(std::string_view(s).substr(0, kPromptPrefix));
  }
  return h.digest().lo;
}

std::vector<Hash128> media_files(const json& j, uint64_t max_bytes) {
  constexpr size_t kMaxFiles = 16;
  std::vector<Hash128> out;
  auto add = [&](const json& v, bool data_url) {
    if (out.size() >= kMaxFiles || !v.is_string()) return;
    std::string_view s = v.get_ref<const std::string&>();
    if (data_url) {
      const size_t at = s.find(";base64,");
      if (s.rfind("data:", 0) != 0 || at == std::string_view::npos) return;
      s.remove_prefix(at + 8);
    }
    try {
      const std::vector<uint8_t> bytes = server::decode_base64(s, max_bytes, "media");
      out.push_back(hash128(bytes.data(), bytes.size()));
    } catch (const std::exception&) {
    }
  };
  auto msgs = j.is_object() ? j.find("messages") : j.end();
  if (msgs == j.end() || !msgs->is_array()) return out;
  for (const json& msg : *msgs) {
    auto content = msg.is_object() ? msg.find("content") : msg.end();
    if (content == msg.end() || !content->is_array()) continue;
    for (const json& part : *content) {
      if (!part.is_object()) continue;
      for (const char* kind : {"image_url", "video_url", "audio_url"})
        if (auto p = part.find(kind); p != part.end() && p->is_object() && p->contains("url"))
          add((*p)["url"], true);
      if (auto a = part.find("input_audio");
          a != part.end() && a->is_object() && a->contains("data"))
        add((*a)["data"], false);
    }
  }
  return out;
}

bool media_order(std::vector<size_t>& order, const std::vector<int64_t>& held) {
  if (order.empty()) return false;
  size_t best = 0;
  for (size_t k = 1; k < order.size(); ++k)
    if (held[order[k]] > held[order[best]]) best = k;
  if (best == 0) return false;
  std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(best),
              order.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  return true;
}

namespace {

// Some worker holds at least one of the request's `total` blocks.
bool any_held(const std::vector<int64_t>& fresh, int64_t total) {
  return std::any_of(fresh.begin(), fresh.end(), [&](int64_t f) { return f >= 0 && f < total; });
}

}  // namespace

bool kv_order(std::vector<size_t>& order, const std::vector<int64_t>& fresh,
              const std::vector<int64_t>& active, int64_t total, double weight) {
  if (order.empty() || !any_held(fresh, total)) return false;
  auto cost = [&](size_t i) {
    return weight * static_cast<double>(fresh[i] < 0 ? total : fresh[i]) +
           static_cast<double>(std::max<int64_t>(0, active[i]));
  };
  const size_t front = order[0];
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cost(a) < cost(b); });
  return order[0] != front;
}

KvChoice kv_choice(const PromptLayout& layout, const std::vector<WorkerInfo>& workers,
                   std::vector<size_t>& order,
                   const std::function<int64_t(const std::string&, std::span<const Hash128>)>& held,
                   const std::function<int64_t(const std::string&)>& active, double weight) {
  KvChoice out;
  out.cached.assign(workers.size(), -1);
  std::map<std::pair<int64_t, std::string>, std::vector<Hash128>> chains;
  std::vector<int64_t> fresh(workers.size(), -1), busy(workers.size(), 0);
  int64_t total = 0;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerInfo& w = workers[i];
    if (w.kv_block <= 0) continue;
    auto [it, added] = chains.try_emplace({w.kv_block, w.encoder});
    if (added) it->second = prompt_chain(layout, w.kv_block, w.encoder);
    const auto n = static_cast<int64_t>(it->second.size());
    const int64_t h = n ? held(w.id, it->second) : -1;
    if (h < 0) continue;
    fresh[i] = n - h;
    out.cached[i] = h * w.kv_block;
    total = std::max(total, n);
    busy[i] = active(w.id);
  }
  out.ordered = !order.empty() && any_held(fresh, total);
  if (!out.ordered) return out;  // nobody holds any of it: the affinity order stands
  out.moved = kv_order(order, fresh, busy, total, weight);
  return out;
}

std::vector<size_t> rendezvous_order(uint64_t key, const std::vector<WorkerInfo>& workers) {
  std::vector<std::pair<uint64_t, size_t>> scored;
  scored.reserve(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) scored.push_back({hash128(workers[i].id, key).lo, i});
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<size_t> out;
  out.reserve(scored.size());
  for (const auto& s : scored) out.push_back(s.second);
  return out;
}

bool balance_order(std::vector<size_t>& order, const std::vector<int64_t>& load, int64_t abs,
                   double rel) {
  if (order.size() < 2 || load[order[0]] < 0) return false;
  size_t best = 0;
  for (size_t k = 1; k < order.size(); ++k)
    if (load[order[k]] >= 0 && load[order[k]] < load[order[best]]) best = k;
  const int64_t first = load[order[0]], least = load[order[best]];
  if (best == 0 || first - least <= abs ||
      static_cast<double>(first) <= rel * static_cast<double>(least))
    return false;
  std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(best),
              order.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  return true;
}

}  // namespace mmrt::cluster

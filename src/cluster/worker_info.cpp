#include "cluster/worker_info.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "cluster/etcd.h"
#include "cluster/wire_fields.h"
#include "core/error.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

constexpr size_t kMaxValueBytes = 16 << 10;
constexpr size_t kMaxField = 256;
constexpr size_t kMaxClasses = 64;

}  // namespace

std::string to_json(const WorkerInfo& w) {
  json j{{"id", w.id},       {"url", w.url},         {"role", w.role},
         {"model", w.model}, {"classes", w.classes}, {"capacity", w.capacity}};
  if (w.kv_block > 0) j["kv_block"] = w.kv_block;
  if (!w.encoder.empty()) j["encoder"] = w.encoder;
  return j.dump();
}

WorkerInfo parse_worker_info(std::string_view s) {
  if (s.size() > kMaxValueBytes)
    throw FormatError("worker info: " + std::to_string(s.size()) + " bytes, over the " +
                      std::to_string(kMaxValueBytes) + " allowed");
  const json j = WireFields::parse(s, 0, "worker info");
  const WireFields f(j, "worker info");
  WorkerInfo w;
  w.id = f.text("id");
  w.url = f.text("url");
  w.role = f.text("role", false);
  if (w.role.empty()) w.role = "both";
  w.model = f.text("model");
  if (w.id.empty()) f.fail("'id' is empty");
  if (w.url.rfind("http://", 0) != 0 || w.url.size() <= 7 ||
      w.url.find_first_of(" \r\n\t") != std::string::npos)
    f.fail("'url' is not http://host:port");
  if (w.role != "both" && w.role != "encode") f.fail("unknown role '" + w.role + "'");
  if (const json* c = f.find("classes")) {
    if (!c->is_array() || c->size() > kMaxClasses)
      f.fail("'classes' is not a list of at most 64 names");
    for (const json& name : *c) {
      if (!name.is_string() || name.get_ref<const std::string&>().size() > kMaxField)
        f.fail("a class name is not a short string");
      w.classes.push_back(name.get<std::string>());
    }
  }
  w.capacity = f.count_or("capacity", 0);
  w.kv_block = f.count_or("kv_block", 0, 4096);
  w.encoder = f.text("encoder", false);
  return w;
}

std::vector<WorkerInfo> list_workers(
    EtcdClient& etcd, const std::string& prefix, const std::string& role, const std::string& model,
    const std::function<void(const std::string& key, const std::string& why)>& ignored) {
  std::vector<WorkerInfo> out;
  for (const KeyValue& kv : etcd.get_prefix(prefix)) {
    WorkerInfo w;
    try {
      w = parse_worker_info(kv.value);
    } catch (const std::exception& e) {
      ignored(kv.key, "ignoring " + kv.key + ": " + e.what());
      continue;
    }
    if (w.role != role) continue;
    if (w.model != model) {
      ignored(kv.key, "ignoring worker " + w.id + " at " + w.url + ": it serves '" + w.model +
                          "', this one '" + model + "'");
      continue;
    }
    out.push_back(std::move(w));
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerInfo& a, const WorkerInfo& b) { return a.id < b.id; });
  return out;
}

}  // namespace mmrt::cluster

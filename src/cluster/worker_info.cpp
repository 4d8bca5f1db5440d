#include "cluster/worker_info.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "cluster/etcd.h"
#include "core/error.h"
#include "io/json_fields.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

constexpr size_t kMaxValueBytes = 16 << 10;
constexpr size_t kMaxField = 256;
constexpr size_t kMaxClasses = 64;

std::string text(const json& j, const char* name, bool required) {
  auto it = j.find(name);
  if (it == j.end()) {
    if (required) throw FormatError(std::string("worker info: '") + name + "' is missing");
    return "";
  }
  if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxField)
    throw FormatError(std::string("worker info: '") + name + "' is not a string of at most " +
                      std::to_string(kMaxField) + " bytes");
  return it->get<std::string>();
}

}  // namespace

std::string to_json(const WorkerInfo& w) {
  return json{{"id", w.id},       {"url", w.url},         {"role", w.role},
              {"model", w.model}, {"classes", w.classes}, {"capacity", w.capacity}}
      .dump();
}

WorkerInfo parse_worker_info(std::string_view s) {
  if (s.size() > kMaxValueBytes)
    throw FormatError("worker info: " + std::to_string(s.size()) + " bytes, over the " +
                      std::to_string(kMaxValueBytes) + " allowed");
  const json j = io::parse_json_or_discard(s);
  if (j.is_discarded() || !j.is_object()) throw FormatError("worker info: not a JSON object");
  WorkerInfo w;
  w.id = text(j, "id", true);
  w.url = text(j, "url", true);
  w.role = text(j, "role", false);
  if (w.role.empty()) w.role = "both";
  w.model = text(j, "model", true);
  if (w.id.empty()) throw FormatError("worker info: 'id' is empty");
  if (w.url.rfind("http://", 0) != 0 || w.url.size() <= 7 ||
      w.url.find_first_of(" \r\n\t") != std::string::npos)
    throw FormatError("worker info: 'url' is not http://host:port");
  if (w.role != "both" && w.role != "encode")
    throw FormatError("worker info: unknown role '" + w.role + "'");
  if (auto it = j.find("classes"); it != j.end()) {
    if (!it->is_array() || it->size() > kMaxClasses)
      throw FormatError("worker info: 'classes' is not a list of at most 64 names");
    for (const json& c : *it) {
      if (!c.is_string() || c.get_ref<const std::string&>().size() > kMaxField)
        throw FormatError("worker info: a class name is not a short string");
      w.classes.push_back(c.get<std::string>());
    }
  }
  if (auto it = j.find("capacity"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      throw FormatError("worker info: 'capacity' is not a count");
    w.capacity = it->get<int64_t>();
  }
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

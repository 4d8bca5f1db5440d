#include "cluster/etcd.h"

#include <curl/curl.h>

#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "core/error.h"
#include "io/json_fields.h"
#include "server/api.h"

namespace mmrt::cluster {

using nlohmann::json;

namespace {

constexpr size_t kMaxAnswerBytes = 64 << 20;  // a prefix read of a large cluster stays far below

size_t on_data(char* p, size_t size, size_t n, void* user) {
  auto* out = static_cast<std::string*>(user);
  if (out->size() + size * n > kMaxAnswerBytes) return 0;  // aborts the transfer
  out->append(p, size * n);
  return size * n;
}

// etcd's gateway writes int64 fields as strings; accepts either form, 0 when absent.
int64_t int_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == s.size() && !s.empty()) return v;
  }
  throw FormatError(std::string("etcd answered a non-integer '") + name + "'");
}

std::string decode(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string()) throw FormatError(std::string("etcd answered a non-string '") + name + "'");
  try {
    const std::vector<uint8_t> b =
        server::decode_base64(it->get_ref<const std::string&>(), kMaxAnswerBytes, name);
    return std::string(b.begin(), b.end());
  } catch (const std::exception&) {
    throw FormatError(std::string("etcd answered '") + name + "' that is not base64");
  }
}

}  // namespace

struct EtcdClient::Impl {
  CURL* curl = nullptr;
  long timeout_ms = 1000;
};

EtcdClient::EtcdClient(std::string endpoint, std::chrono::milliseconds timeout)
    : endpoint_(std::move(endpoint)), impl_(std::make_unique<Impl>()) {
  check_etcd_endpoint(endpoint_);
  while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  impl_->curl = curl_easy_init();
  if (!impl_->curl) throw ResourceExhausted("cannot create an HTTP client for etcd");
  impl_->timeout_ms = static_cast<long>(timeout.count());
}

EtcdClient::~EtcdClient() {
  if (impl_->curl) curl_easy_cleanup(impl_->curl);
}

namespace {

json call(CURL* c, long timeout_ms, const std::string& endpoint, const std::string& path,
          const json& body) {
  const std::string url = endpoint + path, payload = body.dump();
  std::string answer;
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROXY, "");
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK)
    throw Unavailable("etcd at " + endpoint + " (" + path + "): " + curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  json j = io::parse_json_or_discard(answer);
  if (j.is_discarded() || !j.is_object())
    throw FormatError("etcd at " + endpoint + " (" + path + ") answered " + std::to_string(status) +
                      " with something that is not a JSON object");
  if (status != 200) {
    std::string msg = j.value("message", j.value("error", std::string("no message")));
    throw Unavailable("etcd at " + endpoint + " (" + path + ") answered " + std::to_string(status) +
                      ": " + msg);
  }
  return j;
}

}  // namespace

int64_t EtcdClient::grant_lease(int64_t ttl_s) {
  const json j = call(impl_->curl, impl_->timeout_ms, endpoint_, "/v3/lease/grant",
                      {{"TTL", std::to_string(ttl_s)}});
  const int64_t id = int_field(j, "ID");
  if (id == 0) throw FormatError("etcd at " + endpoint_ + " granted a lease without an ID");
  return id;
}

int64_t EtcdClient::keep_alive(int64_t lease) {
  json j;
  try {
    j = call(impl_->curl, impl_->timeout_ms, endpoint_, "/v3/lease/keepalive",
             {{"ID", std::to_string(lease)}});
  } catch (const Unavailable& e) {
    // A lease etcd no longer has is an answer, not an outage.
    if (std::string(e.what()).find("lease not found") != std::string::npos) return 0;
    throw;
  }
  const json& r = j.contains("result") && j["result"].is_object() ? j["result"] : j;
  return int_field(r, "TTL");
}

void EtcdClient::revoke(int64_t lease) {
  call(impl_->curl, impl_->timeout_ms, endpoint_, "/v3/lease/revoke",
       {{"ID", std::to_string(lease)}});
}

void EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  call(impl_->curl, impl_->timeout_ms, endpoint_, "/v3/kv/put", body);
}

std::vector<KeyValue> EtcdClient::get_prefix(const std::string& prefix) {
  const json j = call(
      impl_->curl, impl_->timeout_ms, endpoint_, "/v3/kv/range",
      {{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_range_end(prefix))}});
  std::vector<KeyValue> out;
  auto it = j.find("kvs");
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) throw FormatError("etcd at " + endpoint_ + " answered 'kvs' not a list");
  for (const json& kv : *it) {
    if (!kv.is_object()) throw FormatError("etcd at " + endpoint_ + " answered a bad key");
    out.push_back({decode(kv, "key"), decode(kv, "value"), int_field(kv, "lease"),
                   int_field(kv, "mod_revision")});
  }
  return out;
}

void EtcdClient::remove(const std::string& key) {
  call(impl_->curl, impl_->timeout_ms, endpoint_, "/v3/kv/deleterange",
       {{"key", base64_encode(key)}});
}

void check_etcd_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("http://", 0) != 0)
    throw InvalidArgument("etcd endpoint must be http://host:port, got '" + endpoint + "'");
}

std::string prefix_range_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

}  // namespace mmrt::cluster

#include "cluster/ttft_quote.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/tenants.h"

namespace mmrt::cluster {

WorkerTtft predict_ttft(const engine::Quote& q, const std::string& cls, double age_ms,
                        double sent_ms, const OwnWork& w) {
  WorkerTtft t;
  for (const auto& c : q.classes) {
    if (c.name != cls) continue;
    t.known = true;
    // The queue drains as time passes; an empty step and the margin do not.
    const double floor = std::min(c.floor_ms, c.ahead_ms);
    t.queue_ms = floor + std::max(0.0, c.ahead_ms - floor - std::max(0.0, age_ms));
    t.sent_ms = std::max(0.0, sent_ms);
    const double media = w.patches * q.patch_ns + w.items * q.item_ns;
    const double pairs = w.pairs * q.pair_ns;
    t.own_ms = c.bias * (w.tokens * q.token_ns + pairs + media) * 1e-6;
    t.own_idle_ms = c.bias * (w.tokens * q.token_idle_ns + pairs + media) * 1e-6;
    break;
  }
  return t;
}

ClassBook::ClassBook(const std::string& model_id, const std::string& api_keys_file,
                     const std::string& sla_file)
    : sla_(sla_file.empty() ? engine::SlaConfig::defaults() : engine::SlaConfig::load(sla_file)),
      api_(std::make_unique<server::ApiOptions>()) {
  api_->model_id = model_id;
  api_->sla = &sla_;
  api_->tiers = server::tiers_for(sla_);  // as a server takes them
  tenants_ = api_keys_file.empty() ? std::make_unique<server::Tenants>()
                                   : server::Tenants::load(api_keys_file, sla_);
}

ClassBook::~ClassBook() = default;

const server::Tenant* ClassBook::tenant(const std::string* authorization) const {
  return tenants_->authenticate(authorization);
}

std::optional<Promise> ClassBook::promise(const nlohmann::json& body,
                                          const std::string* authorization) const {
  const server::Tenant* t = tenant(authorization);
  if (!t || body.is_discarded()) return std::nullopt;
  server::RequestClass rc;
  try {
    rc = server::parse_request_class(body, *api_);
  } catch (const std::exception&) {
    return std::nullopt;  // the worker says what is wrong
  }
  Promise p;
  p.cls = server::Tenants::class_of(*t, rc.sla_class, rc.chosen);
  if (p.cls.empty() || !server::Tenants::allows(*t, p.cls)) return std::nullopt;
  // As engine::apply_promise gives it.
  const int64_t budget = sla_.ttft_budget_ns(p.cls, rc.ttft_deadline_ns);
  p.own_deadline = rc.ttft_deadline_ns > 0;
  if (budget <= 0) return std::nullopt;
  p.budget_ms = static_cast<double>(budget) * 1e-6;
  return p;
}

bool ClassBook::refuses(const Promise& p, double ttft_ms) const {
  if (p.own_deadline) return true;
  return sla_.on_miss(p.cls, static_cast<int64_t>(ttft_ms * 1e6)).action == engine::OnMiss::kRefuse;
}

TtftChoice ttft_order(std::vector<size_t>& order, const std::vector<WorkerTtft>& pred,
                      const std::vector<std::string>& ids, const Promise& p, const ClassBook& book,
                      bool own_known) {
  TtftChoice c;
  if (order.empty()) return c;
  auto to_front = [&](size_t k) {
    if (k == 0) return;
    std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k),
                order.begin() + static_cast<std::ptrdiff_t>(k) + 1);
    c.moved = true;
  };
  auto meets = [&](size_t i) { return pred[i].known && pred[i].total_ms() <= p.budget_ms; };
  size_t best = 0;  // the position in `order` of the lowest quote
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if (meets(i) || !pred[i].known) {
      // The first worker not predicted to miss: one that meets the promise, or one without a
      // quote, which may (its own admission decides).
      to_front(k);
      c.front_ms = pred[i].known ? pred[i].total_ms() : -1;
      return c;
    }
    if (pred[i].quoted_ms() < pred[order[best]].quoted_ms()) best = k;
  }
  // Every worker is predicted to miss: the lowest quote goes first.
  to_front(best);
  const WorkerTtft b = pred[order[0]];
  const std::string id = ids[order[0]];
  c.front_ms = b.total_ms();
  // Its quote alone meets the promise, or nearly (what this router sent since may be served
  // already; the quote is a little old), or the class downgrades or accepts a miss: the worker
  // decides.
  if (b.quoted_ms() <= p.budget_ms * (1 + kRefuseSlack) || !book.refuses(p, b.quoted_ms()))
    return c;
  c.moved = false;
  c.refuse = true;
  const char* cls = p.cls.c_str();
  double own = b.own_idle_ms;  // judged on an idle worker, as admission judges it
  for (size_t i : order) own = std::min(own, pred[i].own_idle_ms);
  char buf[400];
  if (own_known && own > p.budget_ms) {  // no queue would make it: no retry helps
    c.retry_after_s = -1;
    std::snprintf(buf, sizeof buf,
                  "its own work alone is predicted at %.0f ms on the fastest of %zu idle workers, "
                  "over the %s class's %.0f ms to first token: this cluster cannot serve it in "
                  "that class (predicted by the router)",
                  own, order.size(), cls, p.budget_ms);
  } else {
    c.retry_after_s =
        std::max(1, static_cast<int>(std::ceil((b.quoted_ms() - p.budget_ms) * 1e-3)));
    std::snprintf(buf, sizeof buf,
                  "predicted time to first token %.0f ms on the best of %zu workers (%s: %.0f ms "
                  "queued ahead + %.0f ms of its own) exceeds the %s class's %.0f ms%s "
                  "(predicted by the router)",
                  b.quoted_ms(), order.size(), id.c_str(), b.queue_ms, b.own_ms, cls, p.budget_ms,
                  own_known ? "" : " before its own prompt and media are counted");
  }
  c.reason = buf;
  return c;
}

void SentWork::add(const std::string& id, int64_t at_ns, double own_ms) {
  std::lock_guard<std::mutex> lk(mu_);
  auto& d = sent_[id];
  while (!d.empty() && d.front().first < at_ns - kKeepNs) d.pop_front();
  d.emplace_back(at_ns, own_ms);
  // Workers gone: their entries go with the next add after kKeepNs.
  for (auto it = sent_.begin(); it != sent_.end();)
    it = !it->second.empty() && it->second.back().first < at_ns - kKeepNs ? sent_.erase(it)
                                                                          : std::next(it);
}

void SentWork::take_back(const std::string& id, int64_t at_ns) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = sent_.find(id);
  if (it == sent_.end()) return;
  auto& d = it->second;
  for (auto e = d.begin(); e != d.end(); ++e)
    if (e->first == at_ns) {
      d.erase(e);
      return;
    }
}

double SentWork::since(const std::string& id, int64_t since_ns) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = sent_.find(id);
  if (it == sent_.end()) return 0;
  double ms = 0;  // (kept for readers with older quotes: pruned by age in add())
  for (const auto& e : it->second)
    if (e.first > since_ns) ms += e.second;
  return ms;
}

}  // namespace mmrt::cluster

#include "server/realtime_connection.h"

#include <atomic>

#include "core/clock.h"
#include "server/api.h"
#include "server/metrics.h"

namespace mmrt::server {

RealtimeConnection::RealtimeConnection(Service& svc, uint64_t key, std::string id,
                                       RealtimeOptions opt)
    : svc_(svc), key_(key), id_(std::move(id)), opt_(std::move(opt)) {}

RealtimeConnection::~RealtimeConnection() {
  for (auto& [t, h] : handles_) h.cancel();
}

void RealtimeConnection::on_open(std::shared_ptr<WsChannel> ch) {
  ch_ = std::move(ch);
  svc_.metrics().realtime().open++;
  svc_.metrics().realtime().opened++;
  session_ = std::make_unique<RealtimeSession>(opt_, *this, id_, now_ns());
  session_->start();
}

void RealtimeConnection::on_text(std::string text) {
  svc_.metrics().realtime().events_in++;
  if (session_) session_->on_event(text, now_ns());
}

void RealtimeConnection::on_close() {
  if (closed_) return;
  closed_ = true;
  if (session_) session_->close();  // cancels its requests
  for (auto& [t, h] : handles_) h.cancel();
  handles_.clear();
  for (const auto& [t, job] : jobs_) {  // their ends are not awaited: counted as cancelled now
    if (job.prefill) continue;
    RequestRecord rec;
    rec.requested_class = job.sla_class;
    rec.outcome = "cancelled";
    svc_.metrics().observe(rec);
  }
  jobs_.clear();
  svc_.metrics().realtime().open--;
  svc_.realtime_closed(key_);
}

void RealtimeConnection::post_tick() {
  if (!ch_) return;
  ch_->post([weak = weak_from_this()] {
    if (auto self = weak.lock(); self && self->session_ && !self->closed_)
      self->session_->tick(now_ns());
  });
}

void RealtimeConnection::send(std::string ev) {
  if (closed_ || !ch_) return;
  svc_.metrics().realtime().events_out++;
  if (ev.rfind(R"({"type":"error")", 0) == 0) svc_.metrics().realtime().errors++;
  ch_->send_text(std::move(ev));
}

void RealtimeConnection::submit(uint64_t ticket, engine::GenerateRequest req, RealtimeJob job) {
  engine::Engine* eng = svc_.engine();
  if (!eng || closed_) {
    auto r = std::make_shared<engine::RequestResult>();
    r->outcome = engine::Outcome::kFailed;
    r->error = ErrorCode::kUnavailable;
    r->reason = "the server is shutting down";
    ch_->post([weak = weak_from_this(), ticket, r] {
      if (auto self = weak.lock(); self && self->session_)
        self->session_->on_done(ticket, *r, now_ns());
    });
    return;
  }
  if (job.prefill) svc_.metrics().realtime().prefills++;
  job.sla_class = req.sla_class;
  jobs_[ticket] = std::move(job);
  auto [it, ok] = handles_.emplace(ticket, eng->submit(std::move(req)));
  auto posted = std::make_shared<std::atomic<bool>>(false);
  it->second.set_notify([weak = weak_from_this(), ch = ch_, ticket, posted] {
    if (posted->exchange(true)) return;
    ch->post([weak, ticket, posted] {
      *posted = false;
      if (auto self = weak.lock()) self->drain(ticket);
    });
  });
}

void RealtimeConnection::cancel(uint64_t ticket) {
  if (auto it = handles_.find(ticket); it != handles_.end()) it->second.cancel();
}

void RealtimeConnection::close(uint16_t code, std::string reason) {
  if (ch_) ch_->close(code, std::move(reason));
}

void RealtimeConnection::drain(uint64_t ticket) {
  auto it = handles_.find(ticket);
  if (it == handles_.end()) return;
  std::string text;
  for (const engine::StreamEvent& ev : it->second.take_events()) {  // all at once, as Call's
    if (ev.kind == engine::StreamEvent::Kind::kText) {
      text += ev.text;
      continue;
    }
    const engine::RequestResult r = it->second.wait();
    handles_.erase(it);
    record(ticket, r);
    if (session_ && !text.empty()) session_->on_text(ticket, text);
    if (session_) session_->on_done(ticket, r, now_ns());
    return;
  }
  if (session_ && !text.empty()) session_->on_text(ticket, text);
}

void RealtimeConnection::record(uint64_t ticket, const engine::RequestResult& r) {
  auto j = jobs_.find(ticket);
  if (j == jobs_.end()) return;
  const RealtimeJob job = std::move(j->second);
  jobs_.erase(j);
  if (!job.prefill) {
    RequestRecord rec;
    rec.result = &r;
    rec.requested_class = r.sla_class;
    label_ended(rec, r, r.error ? from_error_code(*r.error, "").status : 500);
    svc_.metrics().observe(rec);
  }
  svc_.remember_trace(job.trace_id, opt_.tenant, r, 0);
}

}  // namespace mmrt::server

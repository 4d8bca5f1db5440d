#include "cluster/nats_link.h"

#include <cstdio>

#include "core/error.h"

namespace mmrt::cluster {

natsConnection* nats_connect(const std::string& url, const std::string& what) {
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, url.c_str());
  if (s == NATS_OK) s = natsOptions_SetAllowReconnect(opts, true);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);  // forever
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 250);
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 1000);
  // Not up yet: keep trying in the background.
  if (s == NATS_OK) s = natsOptions_SetRetryOnFailedConnect(opts, true, nullptr, nullptr);
  if (s == NATS_OK) s = natsConnection_Connect(&nc, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED)
    throw Unavailable("NATS at " + url + " (" + what + "): " + natsStatus_GetText(s));
  return nc;
}

NatsListener::NatsListener(const std::string& url, const std::string& what,
                           const std::string& subject, natsMsgHandler handler, void* closure)
    : nc_(nats_connect(url, what)) {
  const natsStatus s = natsConnection_Subscribe(&sub_, nc_, subject.c_str(), handler, closure);
  if (s != NATS_OK) {
    natsConnection_Destroy(nc_);
    throw Unavailable("NATS at " + url + ": cannot subscribe to " + subject + ": " +
                      natsStatus_GetText(s));
  }
}

NatsListener::~NatsListener() {
  natsSubscription_Unsubscribe(sub_);
  natsSubscription_Destroy(sub_);
  natsConnection_Destroy(nc_);
}

void IgnoredLog::add(const std::string& subject, const std::string& why) {
  ++count_;
  std::lock_guard<std::mutex> lk(mu_);
  if (logged_.size() < 1024 && logged_.insert(subject + "\n" + why).second)
    std::fprintf(stderr, "mmrt router: ignoring %s (%s): %s\n", what_.c_str(), subject.c_str(),
                 why.c_str());
}

}  // namespace mmrt::cluster

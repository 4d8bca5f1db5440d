#include "cluster/nats_link.h"

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

}  // namespace mmrt::cluster

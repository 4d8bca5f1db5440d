// A connection to NATS as the cluster uses it (libnats): reconnecting by itself, forever, every
// 250 ms, and starting even while the server is not up yet (it connects when it answers).
#pragma once

#include <nats/nats.h>

#include <string>

namespace mmrt::cluster {

// Unavailable naming `url` and `what` when the options are refused or the URL is bad.
natsConnection* nats_connect(const std::string& url, const std::string& what);

}  // namespace mmrt::cluster

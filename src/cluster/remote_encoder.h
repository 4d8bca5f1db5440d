// A worker's way to its encode workers (engine/remote_encoder.h's RemoteEncoder for
// `mmrt serve --remote-encoders`): the encode workers of its model found in etcd (role
// "encode", read every `poll`) or given by URL. An item goes to the encode workers in
// rendezvous order of its request's group (the first item's content key), rotated by its slot
// (a request's items spread over the encode workers; the same request to the same ones, whose
// caches then hold its items), `POST /v1/encode`
// (cluster/encode_protocol.h), and its output is read from the encode worker's transfer agent
// (cluster/transfer.h) into host memory. A refused or unreachable encode worker passes the item
// to the next; an item that would miss its request's deadline by the recent round trips is not
// sent at all (a platinum request's image is then encoded here, colocated); anything else that
// goes wrong (a bad answer, a transfer cut or too slow, an encode worker that died after
// encoding) leaves the item to the asking worker's own encoder, with a log line.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/remote_encoder.h"

namespace mmrt::cluster {

struct RemoteEncoderOptions {
  std::string etcd;  // http://host:port ("": only `urls`)
  std::string prefix = "/mmrt/workers/";
  std::string model;              // the model id encode workers must announce
  std::vector<std::string> urls;  // encode workers given directly (http://host:port)
  std::chrono::milliseconds poll{500};
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds timeout{30000};       // one item, encode and transfer together
  uint64_t max_item_bytes = uint64_t{512} << 20;  // an encoder output larger is not read
};

class RemoteEncoderPool : public engine::RemoteEncoder {
 public:
  explicit RemoteEncoderPool(RemoteEncoderOptions opt);
  ~RemoteEncoderPool() override;
  std::optional<models::PreparedMedia> encode(const engine::RemoteEncodeItem& item) override;
  // Prometheus text: encode workers in view, items sent, bytes and time transferred.
  std::string metrics() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mmrt::cluster

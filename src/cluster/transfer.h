// Moving an encoder's output from the worker that computed it to the worker that needs it,
// shaped like NIXL (register memory, describe it, read it remotely, notify its owner) and backed
// by plain TCP: the owner's TransferAgent listens on a port of its own and serves reads of the
// regions registered with it; the reader pulls a region with read_region, in chunks, within a
// deadline, checks it against the descriptor's checksum and notifies the owner, which releases
// it. Payloads never travel through etcd or NATS, and the HTTP answer that describes a region
// stays small. A region nobody notifies is released after the agent's TTL, and the agent holds
// at most max_bytes at once (registering more is refused): a reader that dies strands nothing
// for long.
//
// Wire (little-endian): the reader sends "MMRTXFR1", op (u8: 1 read, 2 notify), region id
// (u64), offset (u64), length (u64); the agent answers a status byte (0 ok, 1 unknown region,
// 2 out of range, 3 bad request) and, for a read, the `length` bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mmrt::cluster {

struct RegionDesc {
  std::string agent;  // host:port of the agent that holds it
  uint64_t id = 0;
  uint64_t bytes = 0;
  std::string checksum;  // XXH3-128 of the bytes, hex
};

std::string to_json(const RegionDesc& d);
// FormatError naming the field for anything else than what to_json writes.
RegionDesc parse_region_desc(std::string_view json);
// The same as a JSON value (a descriptor inside another message).
nlohmann::json region_json(const RegionDesc& d);
RegionDesc region_from_json(const nlohmann::json& j);

struct TransferAgentOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                 // 0: any free port
  uint64_t max_bytes = uint64_t{1} << 30;       // registered at once
  std::chrono::milliseconds ttl{30000};         // a region nobody notified is released then
  std::chrono::milliseconds io_timeout{10000};  // per connection, each read or write
  int max_connections = 64;
  // Tests: called before the bytes of a read are sent (e.g. to kill the process there).
  std::function<void()> before_read;
};

struct TransferAgentStats {
  int64_t registered = 0, read = 0, notified = 0, expired = 0;
  int64_t bytes_sent = 0, held_bytes = 0, held_regions = 0;
};

class TransferAgent {
 public:
  // Listens at once (Unavailable naming the address when it cannot).
  explicit TransferAgent(TransferAgentOptions opt);
  ~TransferAgent();  // stops serving; readers in flight see their connection close
  TransferAgent(const TransferAgent&) = delete;
  TransferAgent& operator=(const TransferAgent&) = delete;

  std::string address() const;  // host:port readers connect to
  // Registers `bytes` for remote reads and describes it. ResourceExhausted when the agent would
  // hold more than max_bytes.
  RegionDesc register_memory(std::shared_ptr<const std::vector<uint8_t>> bytes);
  void deregister(uint64_t id);
  TransferAgentStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Reads the whole region described into `dst` (exactly desc.bytes long) within `timeout`,
// checks its checksum, then notifies the agent (it releases the region). Unavailable when the
// agent cannot be reached or the read does not finish in time; FormatError on an unknown
// region or a checksum that does not match; InvalidArgument when dst's size differs.
void read_region(const RegionDesc& desc, std::span<uint8_t> dst, std::chrono::milliseconds timeout);

}  // namespace mmrt::cluster

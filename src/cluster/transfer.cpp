#include "cluster/transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "cluster/wire_fields.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"

namespace mmrt::cluster {

namespace {

constexpr char kMagic[8] = {'M', 'M', 'R', 'T', 'X', 'F', 'R', '1'};
constexpr size_t kFrame = 8 + 1 + 8 + 8 + 8;
constexpr size_t kChunk = size_t{1} << 20;
enum Op : uint8_t { kRead = 1, kNotify = 2 };
enum Status : uint8_t { kOk = 0, kUnknown = 1, kOutOfRange = 2, kBadRequest = 3 };

void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// A socket closed when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Waits until `fd` is readable (or writable) or `deadline_ns` passes (or *stop is set): false
// then.
bool wait_for(int fd, bool write, int64_t deadline_ns, const std::atomic<bool>* stop = nullptr) {
  for (;;) {
    const int64_t left_ms = (deadline_ns - now_ns()) / 1000000;
    if (left_ms <= 0 || (stop && stop->load())) return false;
    pollfd p{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 100)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

// Sends or receives exactly n bytes before the deadline: false when the peer closed, failed or
// was too slow.
bool send_all(int fd, const uint8_t* p, size_t n, int64_t deadline_ns,
              const std::atomic<bool>* stop = nullptr) {
  while (n > 0) {
    if (!wait_for(fd, true, deadline_ns, stop)) return false;
    const ssize_t w = ::send(fd, p, std::min(n, kChunk), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool recv_all(int fd, uint8_t* p, size_t n, int64_t deadline_ns,
              const std::atomic<bool>* stop = nullptr) {
  while (n > 0) {
    if (!wait_for(fd, false, deadline_ns, stop)) return false;
    const ssize_t r = ::recv(fd, p, std::min(n, kChunk), MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

std::string checksum_of(const void* p, size_t n) {
  return hash128(p, n).hex();
}

// "host:port" split at its last colon; InvalidArgument otherwise.
std::pair<std::string, int> split_address(const std::string& a) {
  const size_t c = a.rfind(':');
  int port = 0;
  if (c != std::string::npos && c > 0) {
    try {
      size_t used = 0;
      port = std::stoi(a.substr(c + 1), &used);
      if (used != a.size() - c - 1) port = 0;
    } catch (const std::exception&) {
      port = 0;
    }
  }
  if (port <= 0 || port > 65535) throw InvalidArgument("transfer agent address '" + a + "'");
  return {a.substr(0, c), port};
}

sockaddr_in resolve(const std::string& host, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  const std::string h = host == "localhost" ? "127.0.0.1" : host;
  if (::inet_pton(AF_INET, h.c_str(), &sa.sin_addr) == 1) return sa;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (::getaddrinfo(h.c_str(), nullptr, &hints, &res) != 0 || !res)
    throw Unavailable("transfer: cannot resolve '" + host + "'");
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return sa;
}

}  // namespace

nlohmann::json region_json(const RegionDesc& d) {
  return {{"agent", d.agent},
          {"id", std::to_string(d.id)},
          {"bytes", std::to_string(d.bytes)},
          {"checksum", d.checksum}};
}

std::string to_json(const RegionDesc& d) {
  return region_json(d).dump();
}

RegionDesc region_from_json(const nlohmann::json& j) {
  const WireFields f(j, "region descriptor");
  // 64-bit numbers travel as decimal text (as etcd's gateway writes them).
  auto number = [&](const char* name) -> uint64_t {
    const std::string s = f.text(name);
    if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), ::isdigit))
      f.fail(std::string("'") + name + "' is not a number");
    return std::stoull(s);
  };
  RegionDesc d;
  d.agent = f.text("agent");
  split_address(d.agent);
  d.id = number("id");
  d.bytes = number("bytes");
  d.checksum = f.text("checksum");
  if (d.checksum.size() != 32) f.fail("'checksum' is not 32 digits");
  return d;
}

RegionDesc parse_region_desc(std::string_view text) {
  return region_from_json(WireFields::parse(text, 64, "region descriptor"));
}

struct TransferAgent::Impl {
  TransferAgentOptions opt;
  Fd listener;
  std::string address;
  struct Region {
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    int64_t expires_ns = 0;
  };
  mutable std::mutex mu;
  std::unordered_map<uint64_t, Region> regions;
  uint64_t next_id = 1;
  TransferAgentStats stats;
  std::atomic<bool> stop{false};
  std::atomic<int> connections{0};
  std::thread acceptor;
  struct Handler {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Handler> handlers;  // finished ones joined by the acceptor, the rest at stop

  void join_finished() {
    std::vector<Handler> finished;
    {
      std::lock_guard<std::mutex> lk(mu);
      auto mid = std::partition(handlers.begin(), handlers.end(),
                                [](const Handler& h) { return !h.done->load(); });
      std::move(mid, handlers.end(), std::back_inserter(finished));
      handlers.erase(mid, handlers.end());
    }
    for (Handler& h : finished) h.thread.join();
  }

  void release_expired() {
    const int64_t now = now_ns();
    std::lock_guard<std::mutex> lk(mu);
    for (auto it = regions.begin(); it != regions.end();) {
      if (it->second.expires_ns <= now) {
        stats.held_bytes -= static_cast<int64_t>(it->second.bytes->size());
        ++stats.expired;
        it = regions.erase(it);
      } else {
        ++it;
      }
    }
    stats.held_regions = static_cast<int64_t>(regions.size());
  }

  void accept_loop() {
    while (!stop) {
      release_expired();
      join_finished();
      pollfd p{listener.fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      Fd c(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (c.fd < 0) continue;
      if (connections.load() >= opt.max_connections) continue;  // closed: the reader retries
      const int one = 1;
      ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ++connections;
      auto done = std::make_shared<std::atomic<bool>>(false);
      std::lock_guard<std::mutex> lk(mu);
      handlers.push_back({std::thread([this, done, fd = std::move(c)]() mutable {
                            serve(fd.fd);
                            --connections;
                            *done = true;
                          }),
                          done});
    }
  }

  // One connection: frames until the reader closes, fails or is too slow.
  void serve(int fd) {
    for (;;) {
      uint8_t f[kFrame];
      if (!recv_all(fd, f, kFrame, now_ns() + opt.io_timeout.count() * 1000000, &stop)) return;
      const uint8_t op = f[8];
      const uint64_t id = get_u64(f + 9), off = get_u64(f + 17), len = get_u64(f + 25);
      std::shared_ptr<const std::vector<uint8_t>> bytes;
      uint8_t status = kOk;
      if (std::memcmp(f, kMagic, 8) != 0 || (op != kRead && op != kNotify)) {
        status = kBadRequest;
      } else {
        std::lock_guard<std::mutex> lk(mu);
        auto it = regions.find(id);
        if (it == regions.end()) {
          status = kUnknown;
        } else if (op == kNotify) {
          stats.held_bytes -= static_cast<int64_t>(it->second.bytes->size());
          ++stats.notified;
          regions.erase(it);
          stats.held_regions = static_cast<int64_t>(regions.size());
        } else if (off > it->second.bytes->size() || len > it->second.bytes->size() - off) {
          status = kOutOfRange;
        } else {
          bytes = it->second.bytes;  // kept alive for this read even if it expires meanwhile
        }
      }
      const int64_t deadline = now_ns() + opt.io_timeout.count() * 1000000;
      if (!send_all(fd, &status, 1, deadline, &stop) || status == kBadRequest) return;
      if (status != kOk || op != kRead) continue;
      if (opt.before_read) opt.before_read();
      if (!send_all(fd, bytes->data() + off, len, deadline, &stop)) return;
      std::lock_guard<std::mutex> lk(mu);
      ++stats.read;
      stats.bytes_sent += static_cast<int64_t>(len);
    }
  }
};

TransferAgent::TransferAgent(TransferAgentOptions opt) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = std::move(opt);
  m.listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(m.listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const std::string where = m.opt.host + ":" + std::to_string(m.opt.port);
  sockaddr_in sa = resolve(m.opt.host, m.opt.port);
  if (m.listener.fd < 0 ||
      ::bind(m.listener.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(m.listener.fd, 64) != 0)
    throw Unavailable("transfer agent: cannot listen at " + where + ": " + std::strerror(errno));
  socklen_t len = sizeof sa;
  ::getsockname(m.listener.fd, reinterpret_cast<sockaddr*>(&sa), &len);
  m.address = m.opt.host + ":" + std::to_string(ntohs(sa.sin_port));
  m.acceptor = std::thread([&m] { m.accept_loop(); });
}

TransferAgent::~TransferAgent() {
  impl_->stop = true;
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  std::vector<Impl::Handler> handlers;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    handlers.swap(impl_->handlers);
  }
  for (auto& h : handlers) h.thread.join();  // each ends within io_timeout
}

std::string TransferAgent::address() const {
  return impl_->address;
}

RegionDesc TransferAgent::register_memory(std::shared_ptr<const std::vector<uint8_t>> bytes) {
  Impl& m = *impl_;
  m.release_expired();
  RegionDesc d;
  d.agent = m.address;
  d.bytes = bytes->size();
  d.checksum = checksum_of(bytes->data(), bytes->size());
  std::lock_guard<std::mutex> lk(m.mu);
  if (static_cast<uint64_t>(m.stats.held_bytes) + d.bytes > m.opt.max_bytes)
    throw ResourceExhausted("transfer agent holds " + std::to_string(m.stats.held_bytes) +
                            " bytes of " + std::to_string(m.opt.max_bytes) + "; " +
                            std::to_string(d.bytes) + " more do not fit");
  d.id = m.next_id++;
  m.stats.held_bytes += static_cast<int64_t>(d.bytes);
  ++m.stats.registered;
  m.regions[d.id] = {std::move(bytes), now_ns() + m.opt.ttl.count() * 1000000};
  m.stats.held_regions = static_cast<int64_t>(m.regions.size());
  return d;
}

void TransferAgent::deregister(uint64_t id) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->regions.find(id);
  if (it == impl_->regions.end()) return;
  impl_->stats.held_bytes -= static_cast<int64_t>(it->second.bytes->size());
  impl_->regions.erase(it);
  impl_->stats.held_regions = static_cast<int64_t>(impl_->regions.size());
}

TransferAgentStats TransferAgent::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

void read_region(const RegionDesc& desc, std::span<uint8_t> dst,
                 std::chrono::milliseconds timeout) {
  if (dst.size() != desc.bytes)
    throw InvalidArgument("transfer: a region of " + std::to_string(desc.bytes) + " bytes into " +
                          std::to_string(dst.size()));
  const int64_t deadline = now_ns() + timeout.count() * 1000000;
  const auto [host, port] = split_address(desc.agent);
  const std::string what = "transfer from " + desc.agent + ", region " + std::to_string(desc.id);
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in sa = resolve(host, port);
  if (fd.fd < 0) throw Unavailable(what + ": no socket");
  if (::connect(fd.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS)
    throw Unavailable(what + ": " + std::strerror(errno));
  int err = 0;
  socklen_t el = sizeof err;
  if (!wait_for(fd.fd, true, deadline) ||
      ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)
    throw Unavailable(what + ": cannot connect" +
                      (err ? std::string(": ") + std::strerror(err) : ""));
  const int one = 1;
  ::setsockopt(fd.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto ask = [&](uint8_t op, uint64_t len) {
    uint8_t f[kFrame];
    std::memcpy(f, kMagic, 8);
    f[8] = op;
    put_u64(f + 9, desc.id);
    put_u64(f + 17, 0);
    put_u64(f + 25, len);
    uint8_t status = 0;
    if (!send_all(fd.fd, f, kFrame, deadline) || !recv_all(fd.fd, &status, 1, deadline))
      throw Unavailable(what + ": the agent closed the connection or did not answer in " +
                        std::to_string(timeout.count()) + " ms");
    if (status == kUnknown) throw FormatError(what + ": the agent does not hold it");
    if (status != kOk)
      throw FormatError(what + ": refused (status " + std::to_string(status) + ")");
  };
  ask(kRead, desc.bytes);
  if (!recv_all(fd.fd, dst.data(), dst.size(), deadline))
    throw Unavailable(what + ": the read did not finish in " + std::to_string(timeout.count()) +
                      " ms");
  if (checksum_of(dst.data(), dst.size()) != desc.checksum)
    throw FormatError(what + ": checksum mismatch");
  ask(kNotify, 0);
}

}  // namespace mmrt::cluster

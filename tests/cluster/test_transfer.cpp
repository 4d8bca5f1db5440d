// Moving encoder outputs between workers: the transfer agent and its reader over loopback TCP
// (register, read, notify, expiry, the memory cap, a dead or stalled agent, hostile frames and
// descriptors) and the encode protocol's parsing of what another process sends.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <vector>

#include "cluster/cache_events.h"
#include "cluster/encode_protocol.h"
#include "cluster/remote_encoder.h"
#include "cluster/routing.h"
#include "cluster/transfer.h"
#include "cluster/worker_info.h"
#include "core/clock.h"
#include "core/error.h"

using namespace mmrt;
using namespace mmrt::cluster;
using std::chrono::milliseconds;

namespace {

std::shared_ptr<const std::vector<uint8_t>> pattern(size_t n, uint8_t seed) {
  auto v = std::make_shared<std::vector<uint8_t>>(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

// A loopback listener that accepts connections (the kernel's backlog) and never answers.
struct SilentListener {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  SilentListener() {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  ~SilentListener() { ::close(fd); }
};

int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

}  // namespace

TEST(Transfer, ARegionIsReadWholeThenReleased) {
  TransferAgent agent({});
  const auto bytes = pattern(3'000'000, 7);  // several chunks
  const RegionDesc d = agent.register_memory(bytes);
  EXPECT_EQ(d.bytes, bytes->size());
  EXPECT_EQ(agent.stats().held_bytes, 3'000'000);
  const RegionDesc back = parse_region_desc(to_json(d));
  EXPECT_EQ(back.agent, d.agent);
  EXPECT_EQ(back.id, d.id);
  EXPECT_EQ(back.checksum, d.checksum);
  std::vector<uint8_t> dst(d.bytes);
  read_region(back, dst, milliseconds(5000));
  EXPECT_EQ(dst, *bytes);
  const TransferAgentStats s = agent.stats();
  EXPECT_EQ(s.read, 1);
  EXPECT_EQ(s.notified, 1);
  EXPECT_EQ(s.held_bytes, 0);
  EXPECT_EQ(s.bytes_sent, 3'000'000);
  // Released: a second read finds nothing.
  EXPECT_THROW(read_region(back, dst, milliseconds(2000)), FormatError);
}

TEST(Transfer, ChecksumSizeAndUnknownRegionsAreRefused) {
  TransferAgent agent({});
  const auto bytes = pattern(1000, 1);
  RegionDesc d = agent.register_memory(bytes);
  std::vector<uint8_t> small(999);
  EXPECT_THROW(read_region(d, small, milliseconds(1000)), InvalidArgument);
  RegionDesc forged = d;
  forged.checksum = std::string(32, '0');
  std::vector<uint8_t> dst(1000);
  EXPECT_THROW(read_region(forged, dst, milliseconds(2000)), FormatError);
  RegionDesc unknown = d;
  unknown.id += 100;
  EXPECT_THROW(read_region(unknown, dst, milliseconds(2000)), FormatError);
}

TEST(Transfer, TheAgentHoldsAtMostItsCapAndReleasesWhatNobodyReads) {
  TransferAgentOptions o;
  o.max_bytes = 10'000;
  o.ttl = milliseconds(200);
  TransferAgent agent(o);
  const RegionDesc a = agent.register_memory(pattern(6000, 1));
  EXPECT_THROW(agent.register_memory(pattern(6000, 2)), ResourceExhausted);
  const int64_t t0 = now_ns();
  while (agent.stats().held_bytes > 0 && now_ns() - t0 < 5'000'000'000) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(agent.stats().expired, 1);
  EXPECT_NO_THROW(agent.register_memory(pattern(6000, 3)));  // room again
  std::vector<uint8_t> dst(6000);
  EXPECT_THROW(read_region(a, dst, milliseconds(2000)), FormatError);  // expired
}

TEST(Transfer, ADeadOrSilentAgentFailsWithinTheTimeout) {
  RegionDesc d;
  {
    TransferAgent agent({});
    d = agent.register_memory(pattern(100, 1));
  }  // gone: nothing listens there
  std::vector<uint8_t> dst(100);
  EXPECT_THROW(read_region(d, dst, milliseconds(1000)), Unavailable);
  // A listener that accepts and never answers: the read ends at its deadline.
  const SilentListener silent;
  d.agent = "127.0.0.1:" + std::to_string(silent.port);
  const int64_t t0 = now_ns();
  EXPECT_THROW(read_region(d, dst, milliseconds(300)), Unavailable);
  const double waited_ms = static_cast<double>(now_ns() - t0) * 1e-6;
  EXPECT_GE(waited_ms, 250);
  EXPECT_LT(waited_ms, 3000);
}

TEST(Transfer, HostileFramesCloseTheConnectionAndTheAgentGoesOn) {
  TransferAgent agent({});
  const auto bytes = pattern(5000, 9);
  const RegionDesc d = agent.register_memory(bytes);
  auto send_raw = [&](const std::string& frame) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port_of(agent.address())));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frame.size()));
    char status = -1;
    const ssize_t r = ::recv(fd, &status, 1, 0);
    ::close(fd);
    return r == 1 ? static_cast<int>(status) : -1;
  };
  std::string bad_magic(33, '\0');
  EXPECT_EQ(send_raw(bad_magic), 3);
  std::string frame = "MMRTXFR1";
  frame += '\x01';
  for (uint64_t v : {d.id, uint64_t{4000}, uint64_t{2000}})  // past the region's end
    for (int i = 0; i < 8; ++i) frame += static_cast<char>(v >> (8 * i));
  EXPECT_EQ(send_raw(frame), 2);
  std::vector<uint8_t> dst(5000);
  read_region(d, dst, milliseconds(5000));  // still serving
  EXPECT_EQ(dst, *bytes);
}

TEST(Transfer, DescriptorsFromOtherProcessesAreChecked) {
  EXPECT_THROW(parse_region_desc("{"), FormatError);
  EXPECT_THROW(parse_region_desc("[]"), FormatError);
  const std::string ok =
      R"({"agent":"127.0.0.1:9","id":"1","bytes":"4","checksum":"0123456789abcdef0123456789abcdef"})";
  EXPECT_EQ(parse_region_desc(ok).bytes, 4u);
  auto with = [&](const char* field, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(ok);
    j[field] = v;
    return j.dump();
  };
  EXPECT_THROW(parse_region_desc(with("agent", "nowhere")), InvalidArgument);
  EXPECT_THROW(parse_region_desc(with("agent", "h:99999")), InvalidArgument);
  EXPECT_THROW(parse_region_desc(with("id", 1)), FormatError);
  EXPECT_THROW(parse_region_desc(with("bytes", "-4")), FormatError);
  EXPECT_THROW(parse_region_desc(with("bytes", "999999999999999999999")), FormatError);
  EXPECT_THROW(parse_region_desc(with("checksum", "abc")), FormatError);
}

TEST(EncodeProtocol, AnswersRoundTripAndBadOnesAreRefused) {
  EncodeAnswer a;
  a.region = {"127.0.0.1:9", 3, 4 * 6 * 8, std::string(32, 'a')};
  a.item.modality = models::Modality::kVideo;
  a.item.dims = {2, 4, 6};
  a.item.n_tokens = 6;
  a.item.kept_tokens = {0, 1, 2, 5, 7, 9};
  a.item.slice_seconds = 0.5;
  a.rows = 6;
  a.width = 8;
  a.encode_ms = 1.5;
  const EncodeAnswer b = parse_encode_answer(to_json(a));
  EXPECT_EQ(b.item.modality, models::Modality::kVideo);
  EXPECT_EQ(b.item.dims, a.item.dims);
  EXPECT_EQ(b.item.kept_tokens, a.item.kept_tokens);
  EXPECT_EQ(b.item.slice_seconds, 0.5);
  EXPECT_EQ(b.rows, 6);
  EXPECT_EQ(b.width, 8);
  EXPECT_EQ(b.encode_ms, 1.5);
  auto with = [&](const char* field, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(to_json(a));
    j[field] = v;
    return j.dump();
  };
  EXPECT_THROW(parse_encode_answer(with("rows", 7)), FormatError);   // rows != tokens
  EXPECT_THROW(parse_encode_answer(with("width", 9)), FormatError);  // bytes != rows x width
  EXPECT_THROW(parse_encode_answer(with("width", -1)), FormatError);
  EXPECT_THROW(parse_encode_answer(with("modality", "smell")), FormatError);
  EXPECT_THROW(parse_encode_answer(with("dims", std::vector<int>(9, 1))), FormatError);
  EXPECT_THROW(parse_encode_answer(with("kept_tokens", std::vector<int>(7, 1))), FormatError);
  EXPECT_THROW(parse_encode_answer(with("n_tokens", int64_t{1} << 40)), FormatError);
  EXPECT_THROW(parse_encode_answer(with("encode_ms", "fast")), FormatError);
  EXPECT_THROW(parse_encode_answer("{\"region\":"), FormatError);
}

TEST(EncodeProtocol, MediaOptionsAndModalitiesRoundTrip) {
  models::MediaOptions o;
  o.video_prune_threshold = 12.5;
  o.video_nframes = 8;
  o.video_max_pixels = 100000;
  EXPECT_EQ(parse_media_options(to_json(o)), o);
  EXPECT_EQ(parse_media_options("{}"), models::MediaOptions{});
  EXPECT_THROW(parse_media_options(R"({"prune_threshold": 300})"), InvalidArgument);
  EXPECT_THROW(parse_media_options(R"({"nframes": "8"})"), InvalidArgument);
  EXPECT_THROW(parse_media_options("nope"), InvalidArgument);
  EXPECT_EQ(parse_modality("audio"), models::Modality::kAudio);
  EXPECT_THROW(parse_modality("Image"), InvalidArgument);
}

TEST(WorkerInfo, AnEncodeWorkerHasItsRole) {
  WorkerInfo w{"e1", "http://127.0.0.1:9000", "encode", "tiny", {}, 64};
  EXPECT_EQ(parse_worker_info(to_json(w)).role, "encode");
  w.role = "decode";
  EXPECT_THROW(parse_worker_info(to_json(w)), FormatError);
}

TEST(RemoteEncoderPool, AnUnreachableOrSilentEncodeWorkerFailsWithinItsTimeout) {
  EXPECT_THROW(RemoteEncoderPool(RemoteEncoderOptions{}), InvalidArgument);  // none to ask
  RemoteEncoderOptions bad;
  bad.urls = {"127.0.0.1:9000"};
  EXPECT_THROW(RemoteEncoderPool{bad}, InvalidArgument);
  const std::vector<uint8_t> file(100, 7);
  engine::RemoteEncodeItem item;
  item.bytes = file;
  item.estimated_tokens = 4;
  item.width = 8;
  // Nothing listens there: refused at connect, passed on, then failed.
  RemoteEncoderOptions gone;
  gone.urls = {"http://127.0.0.1:1"};
  RemoteEncoderPool pool(gone);
  EXPECT_THROW(pool.encode(item), Unavailable);
  // A listener that never answers: the item's timeout ends it.
  const SilentListener listener;
  RemoteEncoderOptions silent;
  silent.urls = {"http://127.0.0.1:" + std::to_string(listener.port)};
  silent.timeout = milliseconds(300);
  RemoteEncoderPool slow(silent);
  const int64_t t0 = now_ns();
  EXPECT_THROW(slow.encode(item), Unavailable);
  const double waited_ms = static_cast<double>(now_ns() - t0) * 1e-6;
  EXPECT_GE(waited_ms, 250);
  EXPECT_LT(waited_ms, 3000);
  EXPECT_NE(slow.metrics().find("mmrt_remote_encode_sent_total 1"), std::string::npos);
}

TEST(CacheEvents, BatchesAndSnapshotsRoundTripAndBadOnesAreRefused) {
  CacheEvents e;
  e.id = "w-1";
  e.first = 5;
  e.last = 6;
  e.ops = {{true, hash128("a")}, {false, hash128("b")}};
  const CacheEvents back = parse_cache_events(to_json(e));
  EXPECT_EQ(back.id, "w-1");
  EXPECT_EQ(back.first, 5u);
  EXPECT_EQ(back.last, 6u);
  ASSERT_EQ(back.ops.size(), 2u);
  EXPECT_TRUE(back.ops[0].first);
  EXPECT_EQ(back.ops[0].second, hash128("a"));
  EXPECT_FALSE(back.ops[1].first);
  auto with = [&](const char* field, const nlohmann::json& v) {
    nlohmann::json j = nlohmann::json::parse(to_json(e));
    j[field] = v;
    return j.dump();
  };
  EXPECT_THROW(parse_cache_events(with("last", 9)), FormatError);  // numbers != entries
  EXPECT_THROW(parse_cache_events(with("first", 0)), FormatError);
  EXPECT_THROW(parse_cache_events(with("first", -1)), FormatError);
  EXPECT_THROW(parse_cache_events(with("ops", {"*" + hash128("a").hex()})), FormatError);
  EXPECT_THROW(parse_cache_events(with("ops", {"+xyz"})), FormatError);
  EXPECT_THROW(parse_cache_events(with("ops", nlohmann::json::array())), FormatError);
  EXPECT_THROW(parse_cache_events(with("id", "")), FormatError);
  EXPECT_THROW(parse_cache_events(with("snapshot", "yes")), FormatError);
  EXPECT_THROW(parse_cache_events("[1]"), FormatError);
  nlohmann::json snap = nlohmann::json::parse(with("snapshot", true));
  EXPECT_THROW(parse_cache_events(snap.dump()), FormatError);  // a snapshot removes nothing
  snap["ops"] = nlohmann::json::array();
  snap["first"] = snap["last"] = 0;
  EXPECT_TRUE(parse_cache_events(snap.dump()).snapshot);  // an empty cache
  Hash128 h;
  EXPECT_TRUE(Hash128::from_hex(hash128("x").hex(), h));
  EXPECT_EQ(h, hash128("x"));
  EXPECT_FALSE(Hash128::from_hex(std::string(32, 'G'), h));
  EXPECT_FALSE(Hash128::from_hex("abc", h));
}

TEST(Routing, MediaFilesAreTheDecodedBytesAndMoveTheirHolderFirst) {
  const std::string png = "\x89PNG-bytes";
  const std::string b64 = "iVBORy1ieXRlcw==";  // base64 of png
  const auto body = nlohmann::json::parse(
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,)" +
      b64 + R"("}},{"type":"input_audio","input_audio":{"data":")" + b64 +
      R"(","format":"wav"}},{"type":"image_url","image_url":{"url":"http://h/x.png"}},)" +
      R"({"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}},)" +
      R"({"type":"text","text":"hi"}]}]})");
  const std::vector<Hash128> files = media_files(body);
  ASSERT_EQ(files.size(), 2u) << "a URL and a part that does not decode are passed over";
  EXPECT_EQ(files[0], hash128(png.data(), png.size()));
  EXPECT_EQ(files[1], files[0]);
  EXPECT_TRUE(media_files(nlohmann::json::parse(R"({"prompt":"x"})")).empty());
  std::vector<size_t> order = {2, 0, 1};
  EXPECT_FALSE(media_order(order, {0, 0, 0})) << "nobody holds them";
  EXPECT_FALSE(media_order(order, {1, 0, 1})) << "the front holds as many as anyone";
  EXPECT_TRUE(media_order(order, {2, 1, 1}));
  EXPECT_EQ(order, (std::vector<size_t>{0, 2, 1}));
}

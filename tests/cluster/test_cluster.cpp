// The cluster module's plain parts: what a worker announces (parsed from untrusted etcd values),
// how the router orders workers for a request, and etcd's prefix ranges.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cluster/etcd.h"
#include "cluster/load_gauges.h"
#include "cluster/prompt_blocks.h"
#include "cluster/routing.h"
#include "cluster/stream_relay.h"
#include "cluster/ttft_quote.h"
#include "cluster/worker_info.h"
#include "core/error.h"
#include "engine/kv_manager.h"
#include "models/registry.h"
#include "models/tiny_registry.h"

using namespace mmrt;
using namespace mmrt::cluster;

TEST(WorkerInfo, RoundTripsAndChecksEveryField) {
  WorkerInfo w{
      "127.0.0.1:8001-42", "http://127.0.0.1:8001", "both", "tiny", {"platinum", "gold"}, 4096};
  const WorkerInfo back = parse_worker_info(to_json(w));
  EXPECT_EQ(back.id, w.id);
  EXPECT_EQ(back.url, w.url);
  EXPECT_EQ(back.model, w.model);
  EXPECT_EQ(back.classes, w.classes);
  EXPECT_EQ(back.capacity, 4096);
  EXPECT_EQ(back.kv_block, 0) << "a worker publishing no KV events says nothing of its blocks";
  w.kv_block = 16;
  w.encoder = "int8 keep-last 3";
  EXPECT_EQ(parse_worker_info(to_json(w)).kv_block, 16);
  EXPECT_EQ(parse_worker_info(to_json(w)).encoder, w.encoder);
  // Unknown fields are ignored (a newer worker may say more).
  EXPECT_EQ(parse_worker_info(R"({"id":"a","url":"http://h:1","model":"m","gpu":"h200"})").id, "a");
  const std::map<std::string, std::string> bad = {
      {"not json", "not a JSON object"},
      {"[1,2]", "not a JSON object"},
      {R"({"url":"http://h:1","model":"m"})", "'id' is missing"},
      {R"({"id":"","url":"http://h:1","model":"m"})", "'id' is empty"},
      {R"({"id":"a","url":"https://h:1","model":"m"})", "'url' is not http"},
      {R"({"id":"a","url":"http://h:1\r\nX: y","model":"m"})", "'url' is not http"},
      {R"({"id":"a","url":"http://h:1","model":7})", "'model' is not a string"},
      {R"({"id":"a","url":"http://h:1","model":"m","role":"prefill"})", "unknown role"},
      {R"({"id":"a","url":"http://h:1","model":"m","classes":"gold"})", "'classes' is not a list"},
      {R"({"id":"a","url":"http://h:1","model":"m","capacity":-1})", "'capacity' is not a count"},
      {R"({"id":"a","url":"http://h:1","model":"m","capacity":1.5})", "'capacity' is not a count"},
      {R"({"id":"a","url":"http://h:1","model":"m","kv_block":5000})", "'kv_block'"},
  };
  for (const auto& [text, why] : bad) {
    try {
      parse_worker_info(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << text << ": " << e.what();
    }
  }
  EXPECT_THROW(parse_worker_info(std::string(20000, ' ')), FormatError);
  EXPECT_THROW(parse_worker_info(R"({"id":")" + std::string(300, 'x') +
                                 R"(","url":"http://h:1","model":"m"})"),
               FormatError);
}

namespace {
std::string chat(const std::string& system, const std::string& first,
                 const std::string& later = "") {
  std::string m = R"({"model":"tiny","messages":[{"role":"system","content":")" + system +
                  R"("},{"role":"user","content":")" + first + "\"}";
  if (!later.empty())
    m += R"(,{"role":"assistant","content":"ok"},{"role":"user","content":")" + later + "\"}";
  return m + R"(],"max_tokens":4})";
}
}  // namespace

TEST(Routing, EveryTurnOfAConversationHasOneKey) {
  const std::string p = "/v1/chat/completions";
  const uint64_t turn1 = affinity_key(p, chat("be brief", "describe the image"), "Bearer k");
  EXPECT_EQ(turn1, affinity_key(p, chat("be brief", "describe the image", "and now?"), "Bearer k"));
  EXPECT_NE(turn1, affinity_key(p, chat("be brief", "another question"), "Bearer k"));
  EXPECT_NE(turn1, affinity_key(p, chat("be long", "describe the image"), "Bearer k"));
  // Tenants' caches are apart (their keys are salted): so are their keys.
  EXPECT_NE(turn1, affinity_key(p, chat("be brief", "describe the image"), "Bearer other"));
  EXPECT_NE(turn1,
            affinity_key("/v1/completions", chat("be brief", "describe the image"), "Bearer k"));
  // Not JSON: the body's start, never an exception.
  EXPECT_EQ(affinity_key(p, "{{{", ""), affinity_key(p, "{{{", ""));
  // A completion: its prompt's start.
  const std::string head(3000, 'a');
  EXPECT_EQ(affinity_key("/v1/completions", R"({"prompt":")" + head + "b\"}", ""),
            affinity_key("/v1/completions", R"({"prompt":")" + head + "c\"}", ""));
}

TEST(Routing, RendezvousSpreadsKeysAndMovesOnlyALeaversKeys) {
  std::vector<WorkerInfo> ws;
  for (int i = 0; i < 4; ++i) ws.push_back({"w" + std::to_string(i), "http://h:1", "both", "m"});
  std::vector<int> first(4, 0);
  std::vector<size_t> before(1000);
  for (uint64_t k = 0; k < 1000; ++k) {
    const std::vector<size_t> order = rendezvous_order(k * 0x9e3779b97f4a7c15ull, ws);
    ASSERT_EQ(order.size(), 4u);
    before[k] = order[0];
    ++first[order[0]];
  }
  for (int n : first) EXPECT_GT(n, 180) << "1000 keys over 4 workers";
  // w2 leaves: only its keys move, each to its own second choice.
  std::vector<WorkerInfo> three = {ws[0], ws[1], ws[3]};
  for (uint64_t k = 0; k < 1000; ++k) {
    const uint64_t key = k * 0x9e3779b97f4a7c15ull;
    const std::string now = three[rendezvous_order(key, three)[0]].id;
    if (before[k] != 2)
      EXPECT_EQ(now, ws[before[k]].id) << k;
    else
      EXPECT_EQ(now, ws[rendezvous_order(key, ws)[1]].id) << k;
  }
  EXPECT_TRUE(rendezvous_order(1, {}).empty());
}

TEST(Etcd, PrefixRangeEnd) {
  EXPECT_EQ(prefix_range_end("/mmrt/workers/"), "/mmrt/workers0");
  EXPECT_EQ(prefix_range_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_range_end(std::string("\xff\xff", 2)), std::string(1, '\0'));
  EXPECT_THROW(EtcdClient("localhost:2379"), InvalidArgument);
}

namespace {
// An OpenAI-style stream of words[from..] (role chunk, one content chunk per word with its token
// id, the word's index, in mmrt_ids, finish, usage, [DONE]) under `id`: what a worker resuming
// from `from` tokens sends.
std::string stream_of(const std::vector<std::string>& words, const std::string& id,
                      size_t from = 0) {
  auto ev = [&](const std::string& choice, const std::string& extra = "") {
    return "data: {\"id\":\"" + id + "\",\"object\":\"chat.completion.chunk\",\"choices\":[" +
           choice + "]" + extra + "}\n\n";
  };
  std::string s =
      ev(R"({"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null})");
  for (size_t k = from; k < words.size(); ++k)
    s += ev(R"({"index":0,"delta":{"content":")" + words[k] + R"("},"finish_reason":null})",
            ",\"mmrt_ids\":[" + std::to_string(k) + "]");
  s += ev(R"({"index":0,"delta":{},"finish_reason":"length"})");
  s += "data: {\"id\":\"" + id +
       "\",\"choices\":[],\"usage\":{\"completion_tokens\":" + std::to_string(words.size() - from) +
       "}}\n\n";
  return s + "data: [DONE]\n\n";
}

// What a client reads from a relayed stream: content, ids, role chunks, the usage's completion
// tokens, and whether any chunk still holds mmrt_ids.
struct Read {
  std::string text;
  std::set<std::string> ids;
  int roles = 0;
  int64_t completion_tokens = -1;
  bool token_ids = false;
};
Read read_stream(const std::string& s) {
  Read r;
  size_t at = 0;
  while ((at = s.find("data: ", at)) != std::string::npos) {
    const size_t end = s.find("\n\n", at);
    const std::string p = s.substr(at + 6, end - at - 6);
    at = end;
    if (p == "[DONE]") continue;
    const auto j = nlohmann::json::parse(p);
    r.ids.insert(j.value("id", std::string()));
    r.token_ids = r.token_ids || j.contains("mmrt_ids");
    if (j.contains("usage")) r.completion_tokens = j["usage"]["completion_tokens"];
    if (!j["choices"].empty()) {
      const auto& d = j["choices"][0]["delta"];
      if (d.contains("role")) ++r.roles;
      if (d.contains("content")) r.text += d["content"].get<std::string>();
    }
  }
  return r;
}
}  // namespace

// A worker fails mid-stream, after any number of bytes; another continues from the token ids the
// relay saw (its own chunk boundaries, another id): the client reads the text once, under one
// id, with one role chunk, one [DONE], no mmrt_ids, and usage counting every token.
TEST(StreamRelay, AResumedStreamContinuesWithoutLossOrRepeat) {
  const std::vector<std::string> words = {"The", " cache",      " holds", " the",   " prefix",
                                          ".",   " Ro\xc3\xa9", "uters",  " route", "!"};
  std::string whole;
  for (const auto& w : words) whole += w;
  const std::string first = stream_of(words, "chatcmpl-a");
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    StreamRelay relay;
    std::string out;
    const size_t cut = rng() % first.size();
    for (size_t at = 0; at < cut;) {
      const size_t n = std::min<size_t>(1 + rng() % 40, cut - at);
      out += relay.feed(std::string_view(first).substr(at, n));
      at += n;
    }
    if (!relay.done()) {
      relay.resume();
      const std::vector<int32_t> had = relay.ids();
      for (size_t k = 0; k < had.size(); ++k) ASSERT_EQ(had[k], static_cast<int32_t>(k));
      const std::string second = stream_of(words, "chatcmpl-b", had.size());
      for (size_t at = 0; at < second.size();) {
        const size_t n = std::min<size_t>(1 + rng() % 40, second.size() - at);
        out += relay.feed(std::string_view(second).substr(at, n));
        at += n;
      }
    }
    const Read r = read_stream(out);
    ASSERT_EQ(r.text, whole) << "cut at " << cut;
    EXPECT_EQ(r.ids.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(r.roles, 1) << "cut at " << cut;
    EXPECT_FALSE(r.token_ids) << "cut at " << cut;
    EXPECT_EQ(r.completion_tokens, static_cast<int64_t>(words.size())) << "cut at " << cut;
    EXPECT_EQ(relay.sent(), whole);
    EXPECT_EQ(relay.ids().size(), words.size());
    size_t dones = 0;
    for (size_t at = 0; (at = out.find("[DONE]", at)) != std::string::npos; ++at) ++dones;
    EXPECT_EQ(dones, 1u);
  }
}

// The load override moves the least loaded worker to the front only when the first carries
// over `abs` more requests and over `rel` times its load; workers without a fresh gauge are
// left where they are.
TEST(Routing, TheLoadOverrideNeedsALargeImbalance) {
  std::vector<size_t> order = {2, 0, 1};
  EXPECT_FALSE(balance_order(order, {10, 9, 18}, 8, 2.0)) << "9 more, but not over 2x";
  EXPECT_FALSE(balance_order(order, {5, 4, 12}, 8, 2.0)) << "8 more: not over the absolute bound";
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 1}));
  EXPECT_TRUE(balance_order(order, {10, 9, 18}, 8, 1.0));
  EXPECT_EQ(order, (std::vector<size_t>{1, 2, 0})) << "the least loaded first, the rest in order";
  order = {2, 0, 1};
  EXPECT_FALSE(balance_order(order, {-1, -1, 40}, 8, 2.0)) << "nobody else is known";
  EXPECT_FALSE(balance_order(order, {0, 0, -1}, 8, 2.0)) << "the first is not known";
  EXPECT_TRUE(balance_order(order, {-1, 1, 40}, 8, 2.0));
  EXPECT_EQ(order, (std::vector<size_t>{1, 2, 0}));
}

// Dynamo's cost: weight x blocks to prefill + blocks decoding, cheapest first, ties in place;
// nobody holding any block of the request leaves the affinity order alone.
TEST(Routing, TheKvCostWeighsBlocksToPrefillAgainstDecodeLoad) {
  std::vector<size_t> order = {2, 0, 1};
  EXPECT_FALSE(kv_order(order, {10, 10, 10}, {0, 0, 0}, 10, 1.0)) << "nobody holds a block";
  EXPECT_FALSE(kv_order(order, {-1, -1, -1}, {0, 0, 0}, 10, 1.0)) << "nobody is known";
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 1}));
  EXPECT_TRUE(kv_order(order, {10, 2, 10}, {0, 0, 0}, 10, 1.0));
  EXPECT_EQ(order, (std::vector<size_t>{1, 2, 0})) << "the holder first, the others in place";
  order = {2, 0, 1};
  // Worker 1 holds 8 of 10 blocks but decodes 20 more blocks than worker 2: 2 + 25 > 10 + 5.
  EXPECT_TRUE(kv_order(order, {10, 2, 10}, {9, 25, 5}, 10, 1.0) == false);
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 1}));
  EXPECT_TRUE(kv_order(order, {10, 2, 10}, {9, 25, 5}, 10, 4.0)) << "prefill weighs more";
  EXPECT_EQ(order, (std::vector<size_t>{1, 2, 0}));
  order = {0, 1};
  EXPECT_TRUE(kv_order(order, {-1, 3}, {0, 0}, 10, 1.0)) << "an unknown cache counts as empty";
}

// The router's KV choice on a hand-made layout: chains per block size, the holder first, its
// predicted cached tokens, the active blocks weighed, unknown caches and no overlap left alone.
TEST(Routing, TheKvChoiceFollowsTheHeldChainAndTheLoad) {
  PromptLayout layout;
  for (int i = 0; i < 100; ++i) layout.ids.push_back(i);
  layout.salt = hash128("tenant:default");
  const std::vector<Hash128> chain16 = prompt_chain(layout, 16, "bf16");
  ASSERT_EQ(chain16.size(), 6u) << "99 tokens to look up: 6 full blocks";
  EXPECT_EQ(prompt_chain(layout, 32, "bf16").size(), 3u);
  EXPECT_EQ(prompt_chain(layout, 16, "int8"), chain16) << "no media: the precision plays no part";
  std::vector<WorkerInfo> ws(3);
  for (size_t i = 0; i < ws.size(); ++i) {
    ws[i].id = "w" + std::to_string(i);
    ws[i].kv_block = 16;
    ws[i].encoder = "bf16";
  }
  std::map<std::string, int64_t> held = {{"w0", 0}, {"w1", 4}, {"w2", 0}}, active;
  auto held_fn = [&](const std::string& id, std::span<const Hash128> c) {
    EXPECT_EQ(std::vector<Hash128>(c.begin(), c.end()), chain16);
    return held.count(id) ? held[id] : int64_t{-1};
  };
  auto active_fn = [&](const std::string& id) { return active[id]; };
  std::vector<size_t> order = {0, 2, 1};
  KvChoice k = kv_choice(layout, ws, order, held_fn, active_fn, 1.0);
  EXPECT_TRUE(k.ordered && k.moved);
  EXPECT_EQ(order, (std::vector<size_t>{1, 0, 2}));
  EXPECT_EQ(k.cached, (std::vector<int64_t>{0, 64, 0}));
  active["w1"] = 10;  // 2 + 10 > 6 + 0
  order = {0, 2, 1};
  k = kv_choice(layout, ws, order, held_fn, active_fn, 1.0);
  EXPECT_TRUE(k.ordered && !k.moved);
  EXPECT_EQ(order, (std::vector<size_t>{0, 2, 1}));
  held = {{"w0", 0}, {"w2", 0}};  // w1 not in sync; nobody else holds a block
  k = kv_choice(layout, ws, order, held_fn, active_fn, 1.0);
  EXPECT_FALSE(k.ordered);
  EXPECT_EQ(k.cached, (std::vector<int64_t>{0, -1, 0}));
}

TEST(LoadGauge, RoundTripsAndRefusesBadPayloads) {
  LoadGauge g{"w-1", 7, 3, 4, 9, 0.25};
  const LoadGauge back = parse_load_gauge(to_json(g));
  EXPECT_EQ(back.id, "w-1");
  EXPECT_EQ(back.seq, 7);
  EXPECT_EQ(back.running, 4);
  EXPECT_DOUBLE_EQ(back.kv_usage, 0.25);
  for (const char* bad :
       {"", "[]", R"({"seq":1,"waiting":0,"running":0,"in_flight":0,"kv_usage":0})",
        R"({"id":"w","seq":-1,"waiting":0,"running":0,"in_flight":0,"kv_usage":0})",
        R"({"id":"w","seq":1,"waiting":0,"running":0,"in_flight":0,"kv_usage":2})",
        R"({"id":"w","seq":1,"waiting":"0","running":0,"in_flight":0,"kv_usage":0})"})
    EXPECT_THROW(parse_load_gauge(bad), FormatError) << bad;
  EXPECT_THROW(parse_load_gauge(std::string(5000, ' ')), FormatError);
}

// A client that asked for the ids itself keeps them; the splice writes a member in front.
TEST(StreamRelay, IdsTheClientAskedForStayAndMembersSpliceInFront) {
  StreamRelay relay(/*keep_ids=*/true);
  const Read r = read_stream(relay.feed(stream_of({"a", "b"}, "chatcmpl-a")));
  EXPECT_TRUE(r.token_ids);
  EXPECT_EQ(relay.ids(), (std::vector<int32_t>{0, 1}));
  const std::string body = R"({"stream":true,"messages":[]})";
  const auto j = nlohmann::json::parse(splice_member(body, "mmrt_resume_ids", "[1,2]"));
  EXPECT_EQ(j["mmrt_resume_ids"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(j["stream"], true);
}

// Text from other processes is parsed within the project's JSON bounds (depth, values): a
// nesting bomb in an etcd value, a gauge or a request body is "not JSON", never a deep
// recursion in the router.
TEST(Routing, HostileJsonIsNotJson) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');  // valid JSON
  EXPECT_TRUE(parse_body(deep).is_discarded());
  std::string many = "[";
  for (int i = 0; i < 300000; ++i) many += "1,";
  many += "1]";
  EXPECT_TRUE(parse_body(many).is_discarded()) << "over the API's bound on values";
  EXPECT_EQ(affinity_key("/v1/chat/completions", deep, ""),
            affinity_key("/v1/chat/completions", deep, ""));
  EXPECT_THROW(parse_worker_info(std::string(9000, '[')), FormatError);
  EXPECT_THROW(parse_load_gauge(std::string(4000, '[')), FormatError);
}

// The router's layout of a prompt: the key's tenant salts it (no key, or an unknown one, with a
// key file: nothing), an open cluster's requests are the tenant "default", and what the router
// cannot know (another model, media behind a URL, a body the worker refuses) gives nothing.
TEST(PromptBlocks, TheKeysTenantSaltsTheLayoutAndUnknowablesGiveNone) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("mmrt_prompt_blocks_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  models::make_tiny_model(models::family_named("qwen2-vl"), (dir / "m").string(), {});
  std::ofstream((dir / "keys.json").string())
      << R"({"keys": [{"key": "sk-acme-0001", "tenant": "acme"}]})";
  const ClassBook keys("m", (dir / "keys.json").string(), ""), none("m", "", "");
  const PromptBlocks keyed((dir / "m").string(), keys);
  const PromptBlocks open((dir / "m").string(), none);
  const std::string chat = "/v1/chat/completions";
  const nlohmann::json body =
      parse_body(R"({"model":"m","messages":[{"role":"user","content":"hello there"}]})");
  const std::string key = "Bearer sk-acme-0001", wrong = "Bearer sk-acme-0002";
  const auto a = keyed.layout(chat, body, &key);
  const auto o = open.layout(chat, body, nullptr);
  ASSERT_TRUE(a && o);
  EXPECT_EQ(a->salt, engine::tenant_salt("acme"));
  EXPECT_EQ(o->salt, engine::tenant_salt("default"));
  EXPECT_EQ(a->ids, o->ids);
  EXPECT_GT(a->ids.size(), 3u);
  EXPECT_NE(prompt_chain(*a, 4, "bf16"), prompt_chain(*o, 4, "bf16")) << "tenants never share";
  EXPECT_FALSE(keyed.layout(chat, body, nullptr));
  EXPECT_FALSE(keyed.layout(chat, body, &wrong));
  EXPECT_FALSE(open.layout(chat, parse_body(R"({"model":"other","messages":[]})"), nullptr));
  EXPECT_FALSE(open.layout(chat, parse_body("{not json"), nullptr));
  EXPECT_FALSE(
      open.layout(chat,
                  parse_body(R"({"messages":[{"role":"user","content":[{"type":"image_url",)"
                             R"("image_url":{"url":"http://example.com/x.png"}}]}]})"),
                  nullptr))
      << "the worker fetches it: its header is not known here";
  const auto text =
      open.layout("/v1/completions", parse_body(R"({"prompt":"hello there"})"), nullptr);
  ASSERT_TRUE(text);
  EXPECT_LT(text->ids.size(), o->ids.size()) << "a completion's text has no chat template";
  fs::remove_all(dir);
}

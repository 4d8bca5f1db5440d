// The router's own TTFT prediction and admission (cluster/ttft_quote.h), against figures worked
// out by hand from the quote's definition; the quote on the wire (load gauges) with hostile
// values; and the engine's quote against its own admission decisions.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/load_gauges.h"
#include "cluster/ttft_quote.h"
#include "core/error.h"

using namespace mmrt;
using namespace mmrt::cluster;
using nlohmann::json;

namespace {

engine::Quote quote(double platinum_ahead, double silver_ahead, double bias = 1) {
  engine::Quote q;
  q.classes = {{"platinum", platinum_ahead, bias, 4}, {"silver", silver_ahead, 1, 4}};
  q.token_ns = 100'000;      // 0.1 ms a prompt token
  q.token_idle_ns = 50'000;  // 0.05 ms on an idle worker
  q.patch_ns = 10'000;       // 0.01 ms a patch
  q.item_ns = 2'000'000;     // 2 ms an item
  return q;
}

}  // namespace

// queue = max(0, ahead - age) + sent; own = bias x (tokens x 0.1 + patches x 0.01 + items x 2).
TEST(TtftQuote, ThePredictionIsTheQueueLessItsAgePlusTheWorkSentAndOwnWork) {
  const OwnWork w{200, 1000, 1};  // 20 + 10 + 2 = 32 ms
  WorkerTtft t = predict_ttft(quote(100, 900, 1.5), "platinum", 30, 5, w);
  ASSERT_TRUE(t.known);
  EXPECT_NEAR(t.queue_ms, 100 - 30, 1e-9);
  EXPECT_NEAR(t.sent_ms, 5, 1e-9);
  EXPECT_NEAR(t.total_ms(), 100 - 30 + 5 + 1.5 * 32, 1e-9);
  EXPECT_NEAR(t.quoted_ms(), 100 - 30 + 1.5 * 32, 1e-9);
  EXPECT_NEAR(t.own_idle_ms, 1.5 * (10 + 10 + 2), 1e-9) << "its tokens at the idle price";
  EXPECT_NEAR(t.own_ms, 1.5 * 32, 1e-9);
  t = predict_ttft(quote(100, 900), "platinum", 250, 0, w);
  EXPECT_NEAR(t.queue_ms, 4, 1e-9) << "a queue older than itself has drained to its floor";
  t = predict_ttft(quote(100, 900), "platinum", 90, 0, w);
  EXPECT_NEAR(t.queue_ms, 10, 1e-9) << "100 - 90 ms, of which 4 the floor";
  EXPECT_NEAR(predict_ttft(quote(100, 900), "silver", 0, 0, {}).total_ms(), 900, 1e-9);
  EXPECT_FALSE(predict_ttft(quote(100, 900), "gold", 0, 0, w).known) << "not quoted";
  EXPECT_FALSE(predict_ttft(engine::Quote{}, "platinum", 0, 0, w).known);
  // A long prompt's own attention: its query-key pairs at the quoted pair price, under the bias,
  // at load and idle alike.
  engine::Quote q = quote(100, 900, 1.5);
  q.pair_ns = 2;                                                 // 2e-6 ms a pair
  OwnWork longer{4000, 0, 0, engine::causal_pairs(1000, 5000)};  // 12,002,000 pairs: 24.004 ms
  t = predict_ttft(q, "platinum", 0, 0, longer);
  EXPECT_NEAR(t.own_ms, 1.5 * (400 + 24.004), 1e-6);
  EXPECT_NEAR(t.own_idle_ms, 1.5 * (200 + 24.004), 1e-6);
}

TEST(TtftQuote, TheClassBookResolvesPromisesAsAWorkerDoes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("mmrt_ttft_quote_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream((dir / "keys.json").string())
      << R"({"keys": [{"key": "sk-gold-0001", "tenant": "g", "default_class": "gold"},
                      {"key": "sk-plat-0001", "tenant": "p", "classes": ["platinum"]}]})";
  const ClassBook open("m", "", ""), keyed("m", (dir / "keys.json").string(), "");
  auto promise = [](const ClassBook& b, const char* body, const std::string* auth = nullptr) {
    return b.promise(json::parse(body), auth);
  };
  auto p = promise(open, R"({"sla_class":"platinum","messages":[]})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->cls, "platinum");
  EXPECT_DOUBLE_EQ(p->budget_ms, 300);
  EXPECT_FALSE(p->own_deadline);
  p = promise(open, R"({"messages":[]})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->cls, "silver") << "the config's default";
  EXPECT_DOUBLE_EQ(p->budget_ms, 5000);
  p = promise(open, R"({"service_tier":"priority"})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->cls, "platinum") << "service_tier as the API maps it";
  p = promise(open, R"({"sla_class":"platinum","ttft_deadline_ms":120})");
  ASSERT_TRUE(p);
  EXPECT_DOUBLE_EQ(p->budget_ms, 120) << "an explicit deadline tightens";
  EXPECT_TRUE(p->own_deadline);
  p = promise(open, R"({"sla_class":"platinum","ttft_deadline_ms":9000})");
  ASSERT_TRUE(p);
  EXPECT_DOUBLE_EQ(p->budget_ms, 300) << "... and never loosens";
  EXPECT_FALSE(promise(open, R"({"sla_class":"diamond"})")) << "the worker answers 400";
  EXPECT_FALSE(promise(open, R"([1,2])"));
  const std::string gold = "Bearer sk-gold-0001", plat = "Bearer sk-plat-0001";
  p = promise(keyed, R"({"messages":[]})", &gold);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->cls, "gold") << "the tenant's default class";
  EXPECT_FALSE(promise(keyed, R"({"messages":[]})")) << "no key: the worker answers 401";
  EXPECT_FALSE(promise(keyed, R"({"sla_class":"silver"})", &plat)) << "not its class: 403";
  // The rule at a miss: platinum refuses; gold downgrades to silver while silver's 5 s holds,
  // and refuses past it; an own deadline always refuses.
  EXPECT_TRUE(open.refuses({"platinum", 300, false}, 400));
  EXPECT_FALSE(open.refuses({"gold", 800, false}, 900));
  EXPECT_TRUE(open.refuses({"gold", 800, false}, 6000));
  EXPECT_TRUE(open.refuses({"gold", 100, true}, 150));
  fs::remove_all(dir);
}

TEST(TtftQuote, TheFirstWorkerThatMeetsThePromiseGoesFirstAndNoneMeansRefusal) {
  const ClassBook book("m", "", "");
  const std::vector<std::string> ids = {"a", "b", "c"};
  const Promise plat{"platinum", 300, false};
  auto known = [](double q, double o) { return WorkerTtft{true, q, o, 0, o}; };
  // Cost order c, a, b: c misses, a meets: a goes first, the rest keep their order.
  std::vector<size_t> order = {2, 0, 1};
  TtftChoice c = ttft_order(order, {known(100, 50), known(0, 10), known(400, 50)}, ids, plat, book);
  EXPECT_TRUE(c.moved);
  EXPECT_FALSE(c.refuse);
  EXPECT_EQ(order, (std::vector<size_t>{0, 2, 1}));
  EXPECT_DOUBLE_EQ(c.front_ms, 150);
  // The front meets: nothing moves.
  order = {1, 0, 2};
  c = ttft_order(order, {known(100, 50), known(0, 10), known(400, 50)}, ids, plat, book);
  EXPECT_FALSE(c.moved);
  EXPECT_EQ(order, (std::vector<size_t>{1, 0, 2}));
  // None meets, all quoted: refused, retry after the best one's excess (420 - 300 ms: 1 s).
  order = {0, 1, 2};
  c = ttft_order(order, {known(500, 50), known(380, 40), known(900, 50)}, ids, plat, book);
  EXPECT_TRUE(c.refuse);
  EXPECT_EQ(c.retry_after_s, 1);
  EXPECT_NE(c.reason.find("420 ms on the best of 3 workers (b: 380 ms queued ahead + 40 ms"),
            std::string::npos)
      << c.reason;
  c = ttft_order(order, {known(5000, 50), known(3380, 40), known(9000, 50)}, ids, plat, book);
  EXPECT_EQ(c.retry_after_s, 4) << "ceil((3420 - 300) / 1000)";
  // Every worker misses only with the work this router sent since its quote: not refused (the
  // worker may have served it already); the lowest quote goes first.
  order = {0, 1, 2};
  c = ttft_order(order, {{true, 200, 50, 100}, {true, 100, 50, 400}, {true, 250, 50, 60}}, ids,
                 plat, book);
  EXPECT_FALSE(c.refuse);
  EXPECT_EQ(order, (std::vector<size_t>{1, 0, 2}));
  EXPECT_DOUBLE_EQ(c.front_ms, 550);
  // A near miss (within kRefuseSlack) is the worker's to decide.
  order = {0, 1, 2};
  c = ttft_order(order, {known(500, 50), known(280, 40), known(900, 50)}, ids, plat, book);
  EXPECT_FALSE(c.refuse) << "320 ms against 300: within 10 %";
  EXPECT_EQ(order[0], 1u);
  // Over the promise by its own work only under the present load (decodes share the steps):
  // a retry may find a worker idle enough, so it gets a hint.
  order = {0, 1};
  c = ttft_order(order, {{true, 0, 350, 0, 200}, {true, 0, 400, 0, 250}}, {"a", "b"}, plat, book);
  EXPECT_TRUE(c.refuse);
  EXPECT_EQ(c.retry_after_s, 1);
  // Its own work alone is over the promise on every worker: no retry helps.
  order = {0, 1, 2};
  c = ttft_order(order, {known(0, 350), known(500, 310), known(0, 900)}, ids, plat, book);
  EXPECT_TRUE(c.refuse);
  EXPECT_EQ(c.retry_after_s, -1);
  EXPECT_NE(c.reason.find("own work alone is predicted at 310 ms"), std::string::npos) << c.reason;
  // Without the request's own work (a router without the model): its queue alone, said so.
  c = ttft_order(order, {known(1, 0), known(500, 0), known(2000, 0)}, ids,
                 {"platinum", 0.001, true}, book, false);
  EXPECT_TRUE(c.refuse);
  EXPECT_EQ(c.retry_after_s, 1);
  EXPECT_NE(c.reason.find("before its own prompt and media are counted"), std::string::npos)
      << c.reason;
  // A worker without a quote may take it: the first not known to miss goes first.
  order = {0, 1, 2};
  c = ttft_order(order, {known(500, 50), WorkerTtft{}, known(100, 50)}, ids, plat, book);
  EXPECT_FALSE(c.refuse);
  EXPECT_EQ(order, (std::vector<size_t>{1, 0, 2}));
  EXPECT_DOUBLE_EQ(c.front_ms, -1);
  // A class that downgrades a miss: the lowest prediction goes first, the worker decides.
  order = {0, 1, 2};
  c = ttft_order(order, {known(900, 50), known(880, 40), known(990, 50)}, ids, {"gold", 800, false},
                 book);
  EXPECT_FALSE(c.refuse);
  EXPECT_EQ(order[0], 1u);
  // Nothing quoted: nothing predicted, the cost order stands.
  order = {2, 0, 1};
  c = ttft_order(order, std::vector<WorkerTtft>(3), ids, plat, book);
  EXPECT_FALSE(c.refuse || c.moved);
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 1}));
  EXPECT_DOUBLE_EQ(c.front_ms, -1);
}

TEST(TtftQuote, WorkSentSinceAQuoteCountsUntilTheNextOne) {
  SentWork s;
  s.add("a", 1000, 5);
  s.add("a", 2000, 7);
  s.add("b", 2000, 11);
  EXPECT_DOUBLE_EQ(s.since("a", 500), 12);
  EXPECT_DOUBLE_EQ(s.since("a", 1000), 7) << "sent at the quote's arrival: in it";
  EXPECT_DOUBLE_EQ(s.since("a", 500), 12) << "kept for a reader with an older quote";
  EXPECT_DOUBLE_EQ(s.since("b", 0), 11);
  EXPECT_DOUBLE_EQ(s.since("c", 0), 0);
  s.add("b", 2500, 4);
  s.take_back("b", 2500);
  s.take_back("b", 9999);  // nothing sent then: nothing changes
  EXPECT_DOUBLE_EQ(s.since("b", 0), 11) << "a refused request never queued there";
  s.add("c", 2000 + SentWork::kKeepNs + 1, 1);
  EXPECT_DOUBLE_EQ(s.since("b", 0), 0) << "a worker without quotes is forgotten";
}

TEST(TtftQuote, TheQuoteRoundTripsOnTheGaugeAndHostileOnesAreDropped) {
  LoadGauge g{"w-1", 7, 3, 4, 9, 0.25, quote(120.5, 4000, 1.25)};
  const LoadGauge back = parse_load_gauge(to_json(g));
  ASSERT_EQ(back.quote.classes.size(), 2u);
  EXPECT_EQ(back.quote.classes[0].name, "platinum");
  EXPECT_DOUBLE_EQ(back.quote.classes[0].ahead_ms, 120.5);
  EXPECT_DOUBLE_EQ(back.quote.classes[0].bias, 1.25);
  EXPECT_DOUBLE_EQ(back.quote.classes[0].floor_ms, 4);
  EXPECT_DOUBLE_EQ(back.quote.token_ns, 100'000);
  EXPECT_DOUBLE_EQ(back.quote.item_ns, 2'000'000);
  EXPECT_DOUBLE_EQ(back.quote.token_idle_ns, 50'000);
  LoadGauge paired = g;
  paired.quote.pair_ns = 3.5;
  EXPECT_DOUBLE_EQ(parse_load_gauge(to_json(paired)).quote.pair_ns, 3.5);
  EXPECT_TRUE(parse_load_gauge(to_json(LoadGauge{"w", 1})).quote.classes.empty());
  const std::string head = R"({"id":"w","seq":1,"waiting":0,"running":0,"in_flight":0,)"
                           R"("kv_usage":0,"quote":)";
  for (
      const char* bad : {
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[["p",-1,1,0]]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[["p",1,0,0]]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[["",1,1,0]]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[["p",1,1]]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[[1,1,1,0]]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[["p",1,1,2]]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":{}})",
          R"({"token_ns":-1,"patch_ns":1,"item_ns":1,"classes":[]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"classes":[]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"pair_ns":-1,"classes":[["c",2,1,1]]})",
          R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[["p",1e10,1,0]]})",
          R"([])",
      }) {
    // A quote out of bounds loses the quote, not the gauge (its load still counts).
    const LoadGauge b = parse_load_gauge(head + bad + "}");
    EXPECT_TRUE(b.quote.classes.empty()) << bad;
    EXPECT_EQ(b.id, "w") << bad;
  }
  std::string many = R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[)";
  for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + R"(["c",1,1,0])";
  EXPECT_TRUE(parse_load_gauge(head + many + "]}}").quote.classes.empty()) << "17 classes";
  std::string ok =
      R"({"token_ns":1,"token_idle_ns":1,"patch_ns":1,"item_ns":1,"classes":[["c",2,1,1]]})";
  EXPECT_EQ(parse_load_gauge(head + ok + "}").quote.classes.size(), 1u) << "the control";
  // The worker's side sends only what the router takes: 16 classes at most, names of 1-64
  // bytes; no quote at all when a price is not finite.
  LoadGauge wide{"w", 1};
  wide.quote = quote(1, 2);
  wide.quote.classes.push_back({std::string(65, 'x'), 1, 1, 0});
  for (int i = 0; i < 20; ++i)
    wide.quote.classes.push_back({std::string("c").append(std::to_string(i)), 1, 1, 0});
  EXPECT_EQ(parse_load_gauge(to_json(wide)).quote.classes.size(), 16u);
  wide.quote.token_ns = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(parse_load_gauge(to_json(wide)).quote.classes.empty());
}

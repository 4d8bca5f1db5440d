// Scheduler, KV block manager and encoder cache driven by the fake executor (no model).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>

#include "core/error.h"
#include "engine/encoder_cache.h"
#include "engine/kv_manager.h"
#include "engine/scheduler.h"
#include "fake_executor.h"

using namespace mmrt;
using namespace mmrt::engine;
using mmrt::engine::testing::FakeExecutor;

namespace {

struct Harness {
  KvBlockManager kv;
  EncoderCache enc;
  Scheduler sched;
  FakeExecutor exec;
  std::vector<std::unique_ptr<Request>> reqs;
  int64_t now = 0;
  int64_t max_step_tokens = 0;

  Harness(int32_t blocks, int32_t bs, int32_t budget, const std::string& policy = "fcfs",
          uint64_t enc_bytes = 1 << 20)
      : kv(blocks, bs),
        enc(enc_bytes),
        sched({.token_budget = budget, .encoder_row_bytes = mmrt::engine::testing::kFakeWidth * 2},
              kv, enc, make_policy(policy)),
        exec(kv) {}

  Request* submit(std::vector<int32_t> prompt, int32_t max_tokens, const std::string& tenant = "t0",
                  std::vector<MediaItem> media = {}) {
    auto r = std::make_unique<Request>();
    r->id = reqs.size() + 1;
    r->tenant = tenant;
    r->tenant_salt = hash128(tenant);
    r->prompt = std::move(prompt);
    r->media = std::move(media);
    r->sampling.max_tokens = max_tokens;
    r->sampling.ignore_eos = true;
    r->arrival_ns = ++now;
    sched.add(r.get(), now);
    reqs.push_back(std::move(r));
    return reqs.back().get();
  }

  // One step; checks the budget and the manager's invariants.
  bool step() {
    StepPlan plan = sched.schedule(++now);
    if (plan.empty()) return false;
    EXPECT_LE(plan.num_tokens, sched.token_budget());
    max_step_tokens = std::max(max_step_tokens, plan.num_tokens);
    StepOutput out = exec.execute(plan);
    sched.update(plan, out, ++now);
    kv.check_invariants();
    return true;
  }
  void run() {
    while (!sched.idle())
      if (!step()) break;
  }
};

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int32_t>(rng() % 1000);
  return v;
}

MediaItem image(uint64_t content, int64_t begin, int64_t n_tokens,
                const std::string& tenant = "t0") {
  MediaItem m;
  Hasher h;
  h.update_pod(content).update(hash128(tenant));
  m.key = h.digest();
  m.begin = begin;
  m.n_tokens = n_tokens;
  m.encoder_cost = 4 * n_tokens;  // patches, 2x2 merged into one token
  m.prepared.n_tokens = n_tokens;
  m.prepared.encoder_cost = m.encoder_cost;
  return m;
}

// Runs a workload and returns each request's output tokens.
std::map<size_t, std::vector<int32_t>> run_workload(int32_t blocks, int32_t budget, uint32_t seed,
                                                    bool with_media) {
  Harness h(blocks, 16, budget);
  std::mt19937 rng(seed);
  for (int i = 0; i < 12; ++i) {
    int len = 5 + static_cast<int>(rng() % 90);
    std::vector<MediaItem> media;
    if (with_media && i % 3 == 0 && len > 20) media.push_back(image(rng() % 3, 4, 12));
    h.submit(tokens(len, seed * 100 + static_cast<uint32_t>(i)),
             5 + static_cast<int32_t>(rng() % 30), "t0", media);
  }
  h.run();
  std::map<size_t, std::vector<int32_t>> out;
  for (size_t i = 0; i < h.reqs.size(); ++i) {
    EXPECT_EQ(h.reqs[i]->outcome, Outcome::kFinished);
    out[i] = h.reqs[i]->output;
  }
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
  return out;
}

}  // namespace

TEST(Scheduler, StepBudgetNeverExceeded) {
  for (int32_t budget : {1, 7, 64, 300}) {
    Harness h(512, 16, budget);
    for (int i = 0; i < 10; ++i) h.submit(tokens(10 + 37 * i, static_cast<uint32_t>(i)), 8);
    h.run();
    EXPECT_LE(h.max_step_tokens, budget);
    for (auto& r : h.reqs) EXPECT_EQ(r->output.size(), 8u);
  }
}

TEST(Scheduler, DecodeFirstKeepsStreamsRunning) {
  Harness h(512, 16, 32);
  Request* a = h.submit(tokens(10, 1), 50);
  for (int i = 0; i < 3; ++i) h.step();  // a is decoding now
  ASSERT_GE(a->output.size(), 1u);
  h.submit(tokens(400, 2), 4);  // a long prefill arrives
  for (int i = 0; i < 10; ++i) {
    size_t before = a->output.size();
    h.step();
    EXPECT_EQ(a->output.size(), before + 1) << "step " << i << ": the running stream stalled";
  }
}

// A platinum request arriving while a silver prompt is half prefilled: under slo its prompt goes
// first in the next step (admission's queue model assumes exactly this); under fcfs the running
// prompt keeps the budget until it is done.
TEST(Scheduler, UrgentArrivalPrefillsBeforeARunningPromptUnderSlo) {
  for (const char* policy : {"slo", "fcfs"}) {
    SCOPED_TRACE(policy);
    Harness h(512, 16, 32, policy);
    Request* silver = h.submit(tokens(400, 3), 4);
    silver->weight = 1;
    silver->deadline_ns = silver->arrival_ns + 5'000'000'000;
    for (int i = 0; i < 3; ++i) h.step();
    ASSERT_EQ(silver->num_computed, 96);  // running, in prefill
    Request* platinum = h.submit(tokens(20, 4), 4);
    platinum->weight = 4;
    platinum->deadline_ns = platinum->arrival_ns + 300'000'000;
    h.step();
    if (std::string(policy) == "slo") {
      EXPECT_EQ(platinum->num_computed, 20) << "the urgent prompt waited";
      EXPECT_EQ(platinum->output.size(), 1u);
      EXPECT_EQ(silver->num_computed, 96 + 12) << "the running prompt gets the rest";
    } else {
      EXPECT_EQ(platinum->num_computed, 0);
      EXPECT_EQ(silver->num_computed, 96 + 32);
    }
    h.run();
    EXPECT_EQ(silver->output.size(), 4u);
    EXPECT_EQ(platinum->output.size(), 4u);
  }
}

// Two prompts both running their prefill: under slo the next chunk goes by the policy's order
// for prompts (weighted slack), not by the running order (class weight): a gold prompt with the
// smaller weighted slack is not starved by a platinum prompt that can wait.
TEST(Scheduler, RunningPromptsGetChunksInThePromptOrder) {
  Harness h(512, 16, 32, "slo");
  Request* platinum = h.submit(tokens(400, 5), 4);
  platinum->weight = 4;
  platinum->deadline_ns = platinum->arrival_ns + 300'000'000;  // weighted slack ~75 ms
  h.step();
  h.step();
  ASSERT_EQ(platinum->num_computed, 64);
  Request* gold = h.submit(tokens(400, 6), 4);
  gold->weight = 2;
  gold->deadline_ns = gold->arrival_ns + 100'000'000;  // weighted slack ~50 ms
  h.step();
  ASSERT_EQ(gold->num_computed, 32) << "the waiting gold prompt goes first";
  ASSERT_EQ(gold->status, RequestStatus::kRunning);
  h.step();  // both run their prefill now
  EXPECT_EQ(gold->num_computed, 64) << "the platinum prompt took the chunk by class weight";
  EXPECT_EQ(platinum->num_computed, 64);
  h.run();
  EXPECT_EQ(gold->output.size(), 4u);
  EXPECT_EQ(platinum->output.size(), 4u);
}

// The same arrival when KV memory is exactly full after it: the running prompt pauses for the
// step, it is not preempted (which would throw away its computed KV).
TEST(Scheduler, UrgentArrivalNeverPreemptsARunningPrompt) {
  Harness h(8, 16, 32, "slo");  // 8 blocks of 16 tokens
  Request* silver = h.submit(tokens(400, 3), 4);
  silver->weight = 1;
  silver->deadline_ns = silver->arrival_ns + 5'000'000'000;
  for (int i = 0; i < 3; ++i) h.step();
  ASSERT_EQ(silver->num_computed, 96);             // 6 blocks, the next chunk needs a 7th
  Request* platinum = h.submit(tokens(20, 4), 4);  // takes the last 2 blocks
  platinum->weight = 4;
  platinum->deadline_ns = platinum->arrival_ns + 300'000'000;
  h.step();
  EXPECT_EQ(platinum->num_computed, 20);
  EXPECT_EQ(silver->status, RequestStatus::kRunning);
  EXPECT_EQ(silver->num_computed, 96) << "paused for the step";
  EXPECT_EQ(silver->num_preemptions, 0) << "preempted by an admission";
}

TEST(Scheduler, BlockAccountingReturnsToZeroUnderRandomChurn) {
  for (uint32_t seed = 0; seed < 40; ++seed) {
    std::mt19937 rng(seed);
    Harness h(24 + static_cast<int32_t>(rng() % 40), 16, 16 + static_cast<int32_t>(rng() % 200));
    int submitted = 0;
    for (int step = 0; step < 400 && (submitted < 30 || !h.sched.idle()); ++step) {
      if (submitted < 30 && rng() % 3 == 0) {
        std::vector<MediaItem> media;
        int len = 3 + static_cast<int>(rng() % 120);
        if (len > 30 && rng() % 2) media.push_back(image(rng() % 4, 10, 16));
        // Shared prefixes (same seed) make prefix hits and shared blocks likely.
        h.submit(tokens(len, rng() % 5), 1 + static_cast<int32_t>(rng() % 40),
                 rng() % 2 ? "a" : "b", media);
        ++submitted;
      }
      if (!h.reqs.empty() && rng() % 7 == 0) {  // cancel someone
        Request* r = h.reqs[rng() % h.reqs.size()].get();
        h.sched.finish(r, Outcome::kCancelled, ++h.now);
      }
      h.step();
    }
    h.run();
    EXPECT_TRUE(h.sched.idle()) << "seed " << seed;
    EXPECT_EQ(h.kv.num_used_blocks(), 0) << "seed " << seed;
    EXPECT_EQ(h.kv.num_free_blocks(), h.kv.num_blocks()) << "seed " << seed;
    for (auto& r : h.reqs)
      EXPECT_NE(r->outcome, Outcome::kNone) << "seed " << seed << " request " << r->id;
  }
}

TEST(Scheduler, PreemptedRequestsProduceTheSameTokens) {
  for (uint32_t seed = 0; seed < 10; ++seed) {
    for (bool media : {false, true}) {
      auto roomy = run_workload(4096, 256, seed, media);
      // 14 blocks of 16 tokens: too small to hold all of them, so requests get preempted.
      Harness probe(14, 16, 256);
      auto tight = run_workload(14, 256, seed, media);
      EXPECT_EQ(roomy, tight) << "seed " << seed << " media " << media;
    }
  }
  // And preemption did happen in the tight runs.
  Harness h(14, 16, 256);
  for (int i = 0; i < 12; ++i) h.submit(tokens(40 + i, static_cast<uint32_t>(i)), 30);
  h.run();
  EXPECT_GT(h.sched.total_preemptions(), 0);
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
}

TEST(Scheduler, PrefixHitsExactlyWhereContentMatches) {
  Harness h(256, 16, 1024);
  auto base = tokens(100, 7);
  Request* a = h.submit(base, 1);
  h.run();
  // Same 64-token prefix, then different: 4 full blocks match.
  auto b_tokens = base;
  b_tokens.resize(64);
  auto tail = tokens(30, 8);
  b_tokens.insert(b_tokens.end(), tail.begin(), tail.end());
  // Admission's probe sees the same match and takes nothing.
  Request probe;
  probe.id = 999;
  probe.prompt = b_tokens;
  probe.tenant_salt = hash128("t0");
  const int32_t free_before = h.kv.num_free_blocks();
  EXPECT_EQ(h.kv.cached_prefix_tokens(probe), 64);
  EXPECT_EQ(h.kv.num_free_blocks(), free_before);
  EXPECT_FALSE(h.kv.holds(probe));
  probe.tenant_salt = hash128("other-tenant");
  EXPECT_EQ(h.kv.cached_prefix_tokens(probe), 0);
  Request* b = h.submit(b_tokens, 1);
  h.run();
  EXPECT_EQ(b->num_cached_hit, 64);
  // Differs inside block 2: only 2 blocks match.
  auto c_tokens = base;
  c_tokens[40] = (c_tokens[40] + 1) % 1000;
  Request* c = h.submit(c_tokens, 1);
  h.run();
  EXPECT_EQ(c->num_cached_hit, 32);
  // Identical prompt: every full block but the one holding the last token.
  Request* d = h.submit(base, 1);
  h.run();
  EXPECT_EQ(d->num_cached_hit, 96);
  EXPECT_EQ(d->output, a->output);
  // Another tenant with the identical prompt: nothing.
  Request* e = h.submit(base, 1, "other-tenant");
  h.run();
  EXPECT_EQ(e->num_cached_hit, 0);
  EXPECT_EQ(e->output, a->output);  // same answer, computed, not shared
}

TEST(Scheduler, MediaSpansHashByContent) {
  Harness h(256, 16, 1024);
  auto toks = tokens(80, 3);
  Request* a = h.submit(toks, 2, "t0", {image(42, 20, 24)});
  h.run();
  EXPECT_EQ(h.exec.encoder_runs, 1);
  // Same image, same context: whole prefix reused, no encoder run.
  Request* b = h.submit(toks, 2, "t0", {image(42, 20, 24)});
  h.run();
  EXPECT_EQ(b->num_cached_hit, 64);
  EXPECT_EQ(h.exec.encoder_runs, 1);
  EXPECT_EQ(b->output, a->output);
  // Different image content, same token ids: hits stop at the block where the image begins.
  Request* c = h.submit(toks, 2, "t0", {image(43, 20, 24)});
  h.run();
  EXPECT_EQ(c->num_cached_hit, 16);
  EXPECT_EQ(h.exec.encoder_runs, 2);
  EXPECT_NE(c->output, a->output);
  // Same image for another tenant: no KV hit and no encoder-cache hit (its key has the salt).
  Request* d = h.submit(toks, 2, "t1", {image(42, 20, 24, "t1")});
  h.run();
  EXPECT_EQ(d->num_cached_hit, 0);
  EXPECT_EQ(h.exec.encoder_runs, 3);
}

TEST(Scheduler, ImagePrefillWaitsForItsEncoderJobAndMaySpanChunks) {
  Harness h(256, 16, 10);  // tiny budget: the 24-token image is prefilled over several chunks
  Request* r = h.submit(tokens(60, 4), 3, "t0", {image(9, 5, 24)});
  int steps_with_job = 0;
  while (!h.sched.idle()) {
    StepPlan plan = h.sched.schedule(++h.now);
    for (const auto& c : plan.chunks) {
      ASSERT_EQ(c.id, r->id);
      for (const auto& m : r->media) {
        bool overlaps = c.start < m.begin + m.n_tokens && c.start + c.n > m.begin;
        bool planned = !plan.encoder_jobs.empty();
        if (overlaps) {
          EXPECT_TRUE(h.exec.store().contains(m.key) || planned);
        }
      }
    }
    steps_with_job += !plan.encoder_jobs.empty();
    h.sched.update(plan, h.exec.execute(plan), ++h.now);
  }
  EXPECT_EQ(steps_with_job, 1);
  EXPECT_EQ(r->output.size(), 3u);
  EXPECT_GE(r->timeline.count(Event::kPrefillChunk), 6);
}

// An item whose encoder runs in parts, in steps whose time goal charges encoder work to the token
// budget: each step runs the parts that fit (at least one), the chunk stops before the item
// until the step that runs its last part, and the tokens are those of the item encoded whole.
TEST(Scheduler, AnItemInPartsRunsAsTheBudgetAllowsAndItsPrefillWaitsForTheLast) {
  auto run = [](double tokens_per_patch, int64_t parts) {
    Harness h(256, 16, 64);
    h.sched.set_encoder_pacing({tokens_per_patch});
    MediaItem m = image(9, 5, 24);  // 96 patches
    m.encode_parts = parts;
    Request* r = h.submit(tokens(60, 4), 3, "t0", {m});
    std::vector<std::pair<int64_t, int64_t>> ranges;
    while (!h.sched.idle()) {
      StepPlan plan = h.sched.schedule(++h.now);
      bool last = false;
      for (const EncoderJob& j : plan.encoder_jobs) {
        ranges.emplace_back(j.part_begin, j.part_end);
        last |= j.last();
      }
      for (const auto& c : plan.chunks) {
        if (c.start + c.n > m.begin && c.start < m.begin + m.n_tokens) {
          EXPECT_TRUE(h.exec.store().contains(m.key) || last)
              << "a chunk entered the item before its last part";
        }
      }
      h.sched.update(plan, h.exec.execute(plan), ++h.now);
    }
    EXPECT_EQ(r->outcome, Outcome::kFinished);
    EXPECT_EQ(r->timeline.count(Event::kEncoderStart), 1);
    EXPECT_EQ(r->timeline.count(Event::kEncoderEnd), 1);
    EXPECT_EQ(h.exec.partial_encodes(), 0u);
    return std::make_pair(r->output, ranges);
  };
  const auto whole = run(0, 1);
  // 24 patches a part at 1 token a patch: two parts fit the 64-token budget, then two more.
  const auto halves = run(1.0, 4);
  EXPECT_EQ(halves.first, whole.first);
  EXPECT_EQ(halves.second, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 4}}));
  // Nothing fits: one part a step.
  const auto ones = run(100.0, 4);
  EXPECT_EQ(ones.first, whole.first);
  EXPECT_EQ(ones.second,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  // Without a time goal (0 tokens a patch) the item runs whole, however many parts it has.
  const auto all = run(0, 4);
  EXPECT_EQ(all.first, whole.first);
  EXPECT_EQ(all.second, (std::vector<std::pair<int64_t, int64_t>>{{0, 4}}));
}

// A step's time goal bounds its encoder parts whatever its token budget allows: the budget's
// floor (or a per-token cost inflated by one slow step) priced almost every part at nothing, and
// an encoder meant to run beside a stream ran whole (seen as a flaky engine test). Steps of
// 10 ms without encoder work, parts of 24 patches at 0.1 ms: 2.4 ms a part.
TEST(Scheduler, AStepsTimeGoalBoundsItsEncoderPartsWhateverItsBudgetAllows) {
  auto ranges = [](double goal_ns) {
    Harness h(256, 16, 64);
    h.sched.set_encoder_pacing({0.01, 10e6, 0.1e6, goal_ns});  // the budget fits every part
    MediaItem m = image(9, 5, 24);                             // 96 patches, 24 a part
    m.encode_parts = 4;
    h.submit(tokens(60, 4), 3, "t0", {m});
    std::vector<std::pair<int64_t, int64_t>> out;
    while (!h.sched.idle()) {
      StepPlan plan = h.sched.schedule(++h.now);
      for (const EncoderJob& j : plan.encoder_jobs) out.emplace_back(j.part_begin, j.part_end);
      h.sched.update(plan, h.exec.execute(plan), ++h.now);
    }
    return out;
  };
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(ranges(0), (R{{0, 4}})) << "no goal: the budget alone";
  EXPECT_EQ(ranges(20e6), (R{{0, 4}})) << "10 ms of room: every part";
  EXPECT_EQ(ranges(15e6), (R{{0, 2}, {2, 4}})) << "5 ms of room: two parts a step";
  EXPECT_EQ(ranges(8e6), (R{{0, 1}, {1, 2}, {2, 3}, {3, 4}})) << "no room: one part a step";
}

// The request's first-token deadline sets a floor under the parts a step: its encoder must end
// within half the time left (steps of 10 ms and 4 parts of 2.4 ms: with 60 ms left, two a step).
TEST(Scheduler, AnEncodeInPartsKeepsPaceWithItsRequestsDeadline) {
  auto first_range = [](int64_t deadline_in_ns) {
    Harness h(256, 16, 64);
    h.sched.set_encoder_pacing({100.0, 10e6, 0.1e6});  // nothing fits the budget: one part
    MediaItem m = image(9, 5, 24);                     // 96 patches, 24 a part
    m.encode_parts = 4;
    Request* r = h.submit(tokens(60, 4), 3, "t0", {m});
    r->deadline_ns = deadline_in_ns > 0 ? h.now + 1 + deadline_in_ns : 0;
    StepPlan plan = h.sched.schedule(++h.now);
    EXPECT_EQ(plan.encoder_jobs.size(), 1u);
    return plan.encoder_jobs.empty() ? -1 : plan.encoder_jobs[0].part_end;
  };
  EXPECT_EQ(first_range(0), 1) << "no deadline: one part";
  EXPECT_EQ(first_range(1'000'000'000), 1) << "a second left: one part";
  EXPECT_EQ(first_range(60'000'000), 2);
  EXPECT_EQ(first_range(20'000'000), 4) << "no room: the whole rest now";
}

// An encode in parts whose request goes (cancelled) is dropped: the executor forgets it, the
// cache its reservation and pin; the same image sent again starts over from its first part. A
// failed step drops the encodes it advanced the same way.
TEST(Scheduler, AnEncodeInPartsNobodyNeedsIsDropped) {
  Harness h(256, 16, 64, "fcfs", 200);  // room for one 24-row item (4 columns x 2 bytes each)
  h.sched.set_encoder_pacing({100.0});
  MediaItem m = image(9, 5, 24);
  m.encode_parts = 4;
  Request* a = h.submit(tokens(60, 4), 3, "t0", {m});
  ASSERT_TRUE(h.step());
  ASSERT_TRUE(h.step());
  EXPECT_EQ(h.exec.partial_encodes(), 1u);
  h.sched.finish(a, Outcome::kCancelled, ++h.now);
  Request* b = h.submit(tokens(30, 5), 2);
  StepPlan p = h.sched.schedule(++h.now);
  EXPECT_EQ(p.encoder_drops, std::vector<Hash128>{m.key});
  EXPECT_FALSE(h.enc.contains(m.key));
  h.sched.update(p, h.exec.execute(p), ++h.now);
  EXPECT_EQ(h.exec.partial_encodes(), 0u);
  h.run();
  EXPECT_EQ(b->outcome, Outcome::kFinished);
  // The room it held is free again: another item fits the cache whole.
  Request* c = h.submit(tokens(60, 4), 3, "t0", {m});
  StepPlan first = h.sched.schedule(++h.now);
  ASSERT_EQ(first.encoder_jobs.size(), 1u);
  EXPECT_EQ(first.encoder_jobs[0].part_begin, 0);
  EXPECT_TRUE(first.encoder_jobs[0].keep) << "the dropped encode still held the cache's room";
  // A failed step: its requests are failed, its encodes dropped from the next plan.
  h.exec.execute(first);
  h.sched.abort(first);
  h.sched.finish(c, Outcome::kFailed, ++h.now);
  EXPECT_FALSE(h.enc.contains(m.key));
  Request* d = h.submit(tokens(60, 4), 3, "t0", {m});
  StepPlan next = h.sched.schedule(++h.now);
  EXPECT_EQ(next.encoder_drops, std::vector<Hash128>{m.key});
  ASSERT_EQ(next.encoder_jobs.size(), 1u);
  EXPECT_EQ(next.encoder_jobs[0].part_begin, 0);
  h.sched.update(next, h.exec.execute(next), ++h.now);
  h.run();
  EXPECT_EQ(d->outcome, Outcome::kFinished);
  EXPECT_EQ(h.exec.partial_encodes(), 0u);
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
}

// Two requests share an image encoded in parts: the second was admitted without features (the
// cache's reservation for the first one's encode read as a hit) and, served first by its
// priority, plans the next parts. They run on the input the encode began with (seen: 5 image
// requests failed with "pixel_values must be f32 [n_patches, 1176], got f32[]" in the promise
// sweep under slo). Both finish, the item encoded once.
TEST(Scheduler, AnEncodeInPartsContinuesOnItsOwnInputWhoeverNeedsItNext) {
  Harness h(256, 16, 64, "priority");
  h.sched.set_encoder_pacing({100.0});  // one part a step
  MediaItem m = image(9, 5, 24);
  m.encode_parts = 4;
  Request* a = h.submit(tokens(60, 4), 3, "t0", {m});
  ASSERT_TRUE(h.step());
  ASSERT_TRUE(h.enc.contains(m.key)) << "the reservation a later request reads as a hit";
  MediaItem skipped = m;
  skipped.features_skipped = true;
  skipped.prepared = {};
  Request* b = h.submit(tokens(40, 5), 3, "t0", {skipped});
  b->priority = 1;
  int64_t parts = 1;
  while (!h.sched.idle()) {
    StepPlan plan = h.sched.schedule(++h.now);
    EXPECT_TRUE(plan.need_media.empty());
    for (const EncoderJob& j : plan.encoder_jobs) {
      EXPECT_EQ(j.input.n_tokens, m.n_tokens) << "part " << j.part_begin << " for " << j.owner;
      parts += j.part_end - j.part_begin;
    }
    if (plan.empty()) break;
    h.sched.update(plan, h.exec.execute(plan), ++h.now);
  }
  EXPECT_EQ(parts, 4);
  EXPECT_EQ(a->outcome, Outcome::kFinished);
  EXPECT_EQ(b->outcome, Outcome::kFinished);
  EXPECT_EQ(a->output.size(), 3u);
  EXPECT_EQ(b->output.size(), 3u);
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
}

// An item admitted without features (its encoder output was cached) whose cache entry is gone
// by the time the prefill reaches it: the request leaves the plan for its media (no chunk, no
// KV held) and does not block the requests behind it; once it has features it runs as usual.
TEST(Scheduler, SkippedItemLostFromTheCacheHandsTheRequestBack) {
  Harness h(256, 16, 64);
  MediaItem m = image(5, 8, 12);
  m.features_skipped = true;  // admitted on an encoder-cache hit that has since been evicted
  Request* a = h.submit(tokens(40, 1), 2, "t0", {m});
  Request* b = h.submit(tokens(20, 2), 2);
  StepPlan plan = h.sched.schedule(++h.now);
  ASSERT_EQ(plan.need_media, std::vector<RequestId>{a->id});
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].id, b->id) << "the request behind it was blocked";
  EXPECT_TRUE(plan.encoder_jobs.empty());
  h.sched.withdraw(a);
  EXPECT_FALSE(h.sched.contains(a));
  h.sched.update(plan, h.exec.execute(plan), ++h.now);
  h.run();
  EXPECT_EQ(b->outcome, Outcome::kFinished);
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
  // Back with its features (the media stage decoded it): encoded and finished.
  a->media[0].features_skipped = false;
  h.sched.add(a, ++h.now);
  h.run();
  EXPECT_EQ(a->outcome, Outcome::kFinished);
  EXPECT_EQ(a->output.size(), 2u);
  EXPECT_EQ(h.kv.num_used_blocks(), 0);
  // A skipped item whose encoder output is still cached, or whose span the prefill has passed,
  // needs nothing: the request that skipped it is never handed back.
  MediaItem again = image(5, 8, 12);
  again.features_skipped = true;
  Request* c = h.submit(tokens(40, 1), 2, "t0", {again});
  StepPlan p2 = h.sched.schedule(++h.now);
  EXPECT_TRUE(p2.need_media.empty());
  ASSERT_EQ(p2.chunks.size(), 1u);
  EXPECT_TRUE(p2.encoder_jobs.empty()) << "a cached item was encoded again";
  h.sched.update(p2, h.exec.execute(p2), ++h.now);
  h.run();
  EXPECT_EQ(c->outcome, Outcome::kFinished);
}

// The books: LRU order within the byte budget, pins never evicted, a reservation that cannot fit
// changes nothing; the store holds what the executor was told to keep, as f16.
TEST(EncoderCache, LruWithinBudgetAndPins) {
  const uint64_t entry = 8 * 4 * 2;  // [8, 4] f16
  EncoderCache c(3 * entry);
  Hash128 k1 = hash128("1"), k2 = hash128("2"), k3 = hash128("3"), k4 = hash128("4");
  std::vector<Hash128> evicted;
  EXPECT_TRUE(c.reserve(k1, entry, evicted));
  EXPECT_TRUE(c.reserve(k2, entry, evicted));
  EXPECT_TRUE(c.reserve(k3, entry, evicted));
  EXPECT_TRUE(evicted.empty());
  c.touch(k1);  // k1 becomes most recent
  c.pin(k2);
  EXPECT_TRUE(c.reserve(k4, entry, evicted));  // evicts k3 (k2 pinned, k1 recent)
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], k3);
  EXPECT_TRUE(c.contains(k1));
  EXPECT_TRUE(c.contains(k2));
  EXPECT_FALSE(c.contains(k3));
  EXPECT_LE(c.bytes(), c.budget());
  // Too big even with every unpinned entry gone: rejected, and nothing was evicted for it.
  evicted.clear();
  c.pin(k1);
  c.pin(k4);
  EXPECT_FALSE(c.reserve(hash128("big"), 2 * entry, evicted));
  EXPECT_TRUE(evicted.empty());
  EXPECT_TRUE(c.contains(k1) && c.contains(k2) && c.contains(k4));
  EXPECT_EQ(c.stats().rejected, 1);

  const kernels::CpuBackend be(kernels::BackendOptions{.threads = 1});
  EncoderStore store(be);
  Tensor t = Tensor::empty(DType::kF32, {8, 4});
  for (int i = 0; i < 32; ++i) t.data<float>()[i] = 1.0f + static_cast<float>(i);
  store.put(k1, t);
  float row[4];
  store.read_rows(k1, 2, 1, row);
  EXPECT_EQ(row[0], 9.0f);
  EXPECT_EQ(store.bytes(), entry);
  EXPECT_THROW(store.read_rows(k1, 7, 2, row), InvalidArgument);
  EXPECT_THROW(store.read_rows(k2, 0, 1, row), NotFound);
  store.erase(k1);
  EXPECT_EQ(store.bytes(), 0u);
}

// A cache too small for every image at once: the scheduler evicts through the plan, the
// executor frees what it is told, and a request that needs an evicted item again gets a new
// encoder job (the fake executor throws when it reads an entry it was told to free).
TEST(Scheduler, EvictionsTravelInThePlan) {
  Harness h(256, 16, 64, "fcfs",
            2 * 12 * mmrt::engine::testing::kFakeWidth * 2);  // two 12-token items
  // Different text before each image: no KV reuse, every item needs its encoder output.
  uint32_t seed = 5;
  for (uint64_t content : {1, 2, 3, 1}) {
    Request* r = h.submit(tokens(40, seed++), 2, "t0", {image(content, 8, 12)});
    h.run();
    ASSERT_EQ(r->outcome, Outcome::kFinished);
  }
  EXPECT_EQ(h.exec.encoder_runs, 4) << "item 1 was evicted by item 3 and had to run again";
  EXPECT_EQ(h.enc.stats().evictions, 2);
  EXPECT_EQ(h.enc.stats().misses, 4);
  EXPECT_LE(h.exec.store().bytes(), h.enc.budget());
  EXPECT_EQ(h.exec.store().size(), h.enc.size());
}

// One step that both reads a cached item and needs room for a new one: the read entry is pinned
// when its chunk is scheduled, so the new item's reservation evicts another entry, never the one
// this very step reads (the fake executor throws on a read of a freed entry).
TEST(Scheduler, AReservationNeverEvictsWhatTheSameStepReads) {
  Harness h(256, 16, 512, "fcfs", 2 * 12 * mmrt::engine::testing::kFakeWidth * 2);
  for (uint64_t content : {1, 2}) {  // item 1 then item 2 cached; item 1 is the older
    h.submit(tokens(30, static_cast<uint32_t>(content)), 1, "t0", {image(content, 4, 12)});
    h.run();
  }
  ASSERT_EQ(h.exec.encoder_runs, 2);
  Request* a = h.submit(tokens(30, 10), 3, "t0", {image(1, 4, 12)});  // reads item 1
  Request* b = h.submit(tokens(30, 11), 3, "t0", {image(3, 4, 12)});  // needs a new item 3
  StepPlan plan = h.sched.schedule(++h.now);
  ASSERT_EQ(plan.chunks.size(), 2u) << "both in one step";
  ASSERT_EQ(plan.encoder_jobs.size(), 1u);
  ASSERT_EQ(plan.encoder_frees.size(), 1u);
  EXPECT_NE(plan.encoder_frees[0], a->media[0].key) << "the entry this step reads was evicted";
  h.sched.update(plan, h.exec.execute(plan), ++h.now);
  h.run();
  EXPECT_EQ(a->outcome, Outcome::kFinished);
  EXPECT_EQ(b->outcome, Outcome::kFinished);
  EXPECT_EQ(h.exec.encoder_runs, 3);
}

// A stream resumed from the tokens another worker delivered (Request::resume): its prompt and
// those tokens are prefilled (in chunks when the budget is small), sampling continues at their
// draw index, and it ends with the undisturbed run's tokens, the resumed ones never sampled
// again; its first token here is its first generated one.
TEST(Scheduler, AResumedRequestContinuesTheUndisturbedRun) {
  const std::vector<int32_t> prompt = tokens(37, 11);
  Harness whole(64, 16, 256);
  Request* r = whole.submit(prompt, 20);
  whole.run();
  ASSERT_EQ(r->output.size(), 20u);
  for (int32_t budget : {256, 16}) {
    for (size_t k : {1, 7, 19}) {
      Harness h(64, 16, budget);
      auto q = std::make_unique<Request>();
      q->id = 1;
      q->tenant = "t0";
      q->tenant_salt = hash128("t0");
      q->prompt = prompt;
      q->sampling.max_tokens = 20;
      q->sampling.ignore_eos = true;
      q->resume(std::vector<int32_t>(r->output.begin(), r->output.begin() + k), 1000);
      EXPECT_EQ(q->generated(), 0);
      EXPECT_EQ(q->prefill_tokens(), static_cast<int64_t>(prompt.size() + k));
      h.sched.add(q.get(), ++h.now);
      h.run();
      EXPECT_EQ(q->output, r->output) << "budget " << budget << ", resumed after " << k;
      EXPECT_EQ(q->generated(), static_cast<int64_t>(20 - k));
      EXPECT_EQ(q->timeline.count(Event::kFirstToken), 1);
    }
  }
  Request bad;
  bad.sampling.max_tokens = 4;
  EXPECT_THROW(bad.resume({1, 2, 3, 4}, 1000), InvalidArgument) << "nothing left to generate";
  EXPECT_THROW(bad.resume({1, 1000}, 1000), InvalidArgument) << "outside the vocabulary";
  EXPECT_THROW(bad.resume({-1}, 1000), InvalidArgument);
  EXPECT_EQ(bad.resumed, 0);
}

// The encoder cache tells its listener which files it holds: stored on a file's first entry,
// removed with its last (two tenants' entries of one file count once), evictions included.
TEST(EncoderCache, TheListenerSeesFilesComeAndGo) {
  std::vector<std::pair<bool, Hash128>> seen;
  EncoderCache c(300, [&](bool stored, const Hash128& f) { seen.emplace_back(stored, f); });
  const Hash128 file = hash128("file"), other = hash128("other");
  std::vector<Hash128> evicted;
  ASSERT_TRUE(c.reserve(hash128("t1"), 100, evicted, file));
  ASSERT_TRUE(c.reserve(hash128("t2"), 100, evicted, file));  // another tenant, same file
  ASSERT_TRUE(c.reserve(hash128("x"), 100, evicted));         // no file hash: not told
  EXPECT_EQ(seen, (std::vector<std::pair<bool, Hash128>>{{true, file}}));
  c.erase(hash128("t1"));
  EXPECT_EQ(seen.size(), 1u) << "t2 still holds it";
  ASSERT_TRUE(c.reserve(hash128("o"), 200, evicted, other));  // evicts t2, the oldest
  EXPECT_EQ(seen,
            (std::vector<std::pair<bool, Hash128>>{{true, file}, {false, file}, {true, other}}));
}

TEST(KvBlockManager, TheListenerSeesTheChainOfKeysComeAndGo) {
  std::vector<std::pair<bool, Hash128>> seen;
  KvBlockManager kv(4, 16, true,
                    [&](bool stored, const Hash128& k) { seen.emplace_back(stored, k); });
  Request r;
  r.id = 1;
  r.tenant_salt = tenant_salt("acme");
  r.prompt = tokens(40, 7);
  r.media.push_back(image(5, 10, 12, "acme"));  // spans both full blocks
  kv.acquire_cached_prefix(r);
  ASSERT_TRUE(kv.allocate(r, 40));
  r.num_computed = 40;
  kv.commit(r);
  // The reference chain, written out: parent, the block's tokens, then each media span that
  // overlaps it with where in the span the block starts.
  auto ref = [&](const Hash128& parent, int64_t b0) {
    Hasher h;
    h.update(parent);
    for (int64_t i = b0; i < b0 + 16; ++i) h.update_pod(r.prompt[static_cast<size_t>(i)]);
    h.update(r.media[0].key);
    h.update_pod(std::max<int64_t>(b0 - 10, 0));
    return h.digest();
  };
  const Hash128 k0 = ref(hash128("tenant:acme"), 0), k1 = ref(k0, 16);
  EXPECT_EQ(seen, (std::vector<std::pair<bool, Hash128>>{{true, k0}, {true, k1}}))
      << "the two full blocks, in chain order (the third holds 8 tokens: not a key)";
  kv.free(r);
  Request other;
  other.id = 2;
  other.tenant_salt = tenant_salt("acme");
  other.prompt = tokens(64, 8);
  kv.acquire_cached_prefix(other);
  // Every block: both keys evicted, the chain's tail first (free() queues a sequence's last
  // blocks ahead of its shared prefix).
  ASSERT_TRUE(kv.allocate(other, 64));
  EXPECT_EQ(seen, (std::vector<std::pair<bool, Hash128>>{
                      {true, k0}, {true, k1}, {false, k1}, {false, k0}}));
  EXPECT_EQ(media_cache_key(hash128("c"), tenant_salt("a"), "int8"),
            media_cache_key(hash128("c"), tenant_salt("a"), "int8"));
  EXPECT_NE(media_cache_key(hash128("c"), tenant_salt("a"), "int8"),
            media_cache_key(hash128("c"), tenant_salt("a"), "bf16"));
}

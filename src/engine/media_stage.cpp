#include "engine/media_stage.h"

#include "engine/kv_manager.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"

namespace mmrt::engine {

namespace {

// A queue and its worker threads.
class Workers {
 public:
  // run(submission, index of the thread running it)
  Workers(int n, std::function<void(Submission*, int)> run) : run_(std::move(run)) {
    for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~Workers() { stop(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  void push(Submission* s) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(s);
    }
    cv_.notify_one();
  }

 private:
  void loop(int lane) {
    for (;;) {
      Submission* s = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        s = queue_.front();
        queue_.pop_front();
      }
      run_(s, lane);
    }
  }
  std::function<void(Submission*, int)> run_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Submission*> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// An error of a media item itself (corrupt, unsupported, too large): the request fails.
class MediaFailure : public Error {
 public:
  MediaFailure(const Error& err, size_t item)
      : Error(err.code(), err.what()), item(static_cast<int32_t>(item)) {}
  int32_t item;  // which (request order)
};

std::string count(int64_t n, const char* what) {
  return std::to_string(n) + " " + what;
}

// Decode + preprocessing time of the items of `s.to_preprocess`, as admission expects it.
void expect_media(Submission& s, const MediaCostModel& cost) {
  int64_t pixels = 0;
  for (const size_t k : s.to_preprocess) pixels += s.media.at(k).estimate.source_pixels;
  s.req->media_pending = !s.to_preprocess.empty();
  s.req->expected_media_ns = cost.predict_ns(static_cast<int64_t>(s.to_preprocess.size()), pixels);
}

// What preprocessing made of items whose header could not tell (a pruned video's kept tokens),
// by content key (the tenant's salt and the item's options included), so that the same item in
// a later turn is laid out exactly before it is decoded, and not decoded at all when its
// features are cached. Least recently used entries go first past either cap.
class LayoutMemo {
 public:
  std::optional<models::PreparedMedia> find(const Hash128& key) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  // `item`'s layout: dims, token count, encoder cost, kept tokens (not its features).
  void put(const Hash128& key, const models::PreparedMedia& item) {
    models::PreparedMedia shell;
    shell.modality = item.modality;
    shell.dims = item.dims;
    shell.n_tokens = item.n_tokens;
    shell.encoder_cost = item.encoder_cost;
    shell.kept_tokens = item.kept_tokens;
    shell.slice_seconds = item.slice_seconds;
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) erase(it);
    ints_ += shell.kept_tokens.size() + shell.dims.size();
    lru_.emplace_front(key, std::move(shell));
    index_.emplace(key, lru_.begin());
    while (!lru_.empty() && (index_.size() > kMaxItems || ints_ > kMaxInts))
      erase(index_.find(lru_.back().first));
  }

 private:
  using Entry = std::pair<Hash128, models::PreparedMedia>;
  static constexpr size_t kMaxItems = 4096;
  static constexpr size_t kMaxInts = size_t{4} << 20;  // 16 MiB of kept-token lists
  void erase(std::unordered_map<Hash128, std::list<Entry>::iterator, Hash128Hasher>::iterator it) {
    ints_ -= it->second->second.kept_tokens.size() + it->second->second.dims.size();
    lru_.erase(it->second);
    index_.erase(it);
  }
  std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<Hash128, std::list<Entry>::iterator, Hash128Hasher> index_;
  size_t ints_ = 0;
};

}  // namespace

struct MediaStage::Impl {
  const models::ModelSpec& spec;
  const models::Processor& processor;
  const io::Tokenizer& tok;
  MediaStageConfig cfg;
  Done done;
  // Media preprocessing cost per item and per source pixel, learned from what the workers
  // measured (written by them, read by prepare and the step loop).
  MediaCostModel media_cost;
  std::unique_ptr<sandbox::MediaSandbox> sandbox;  // when cfg.sandbox.enabled
  std::unique_ptr<Workers> prepare_workers, media_workers;
  LayoutMemo layouts;  // written by apply() (the step loop), read by prepare()
  std::atomic<int64_t> remote_encoded{0}, remote_declined{0}, remote_failed{0};

  Impl(const models::ModelSpec& s, const models::Processor& p, const io::Tokenizer& t,
       const MediaStageConfig& c, Done d)
      : spec(s), processor(p), tok(t), cfg(c), done(std::move(d)) {}

  // The prompt must leave room for a token in the context and fit the KV cache with the output
  // it may produce. A prompt laid out from an upper bound (a pruned video's estimate) is checked
  // once its media are preprocessed, not refused for tokens it may not have.
  void check_fits(Request& r) const {
    const int64_t prompt = static_cast<int64_t>(r.prompt.size());
    const int64_t ctx = spec.context_length;
    if (ctx > 0 && prompt >= ctx)
      throw InvalidArgument("the prompt has " + count(prompt, "tokens") +
                            " and the model's context holds " + count(ctx, "tokens") +
                            " (it must leave room for at least one generated token)");
    const int64_t out =
        ctx > 0 ? std::min<int64_t>(r.sampling.max_tokens, ctx - prompt) : r.sampling.max_tokens;
    if (prompt + out > cfg.kv_capacity_tokens)
      throw ResourceExhausted("request needs " + std::to_string(prompt + out) +
                              " tokens of KV cache (prompt " + std::to_string(prompt) +
                              " + max_tokens " + std::to_string(out) + "), the cache holds " +
                              std::to_string(cfg.kv_capacity_tokens));
    r.max_total_tokens = ctx;
  }

  void prepare(Submission& s) {
    Request& r = *s.req;
    if (!s.prompt_ids.empty()) {
      if (!s.media.empty())
        throw InvalidArgument("a request of token ids cannot carry media (give chat messages)");
      for (int32_t t : s.prompt_ids)
        if (t < 0 || t >= spec.vocab_size)
          throw InvalidArgument("prompt token id " + std::to_string(t) + " is outside [0, " +
                                std::to_string(spec.vocab_size) + ")");
      r.prompt = std::move(s.prompt_ids);
    } else if (!s.prompt_text.empty()) {
      if (!s.media.empty() || !s.messages.empty())
        throw InvalidArgument("a raw text prompt cannot carry media or messages");
      r.prompt = tok.encode(s.prompt_text);
      s.prompt_text.clear();
    } else {
      if (s.messages.empty()) throw InvalidArgument("request has no messages and no prompt ids");
      // Media parts and attached items must agree, per modality and in order.
      std::vector<models::Modality> parts;
      for (const auto& m : s.messages)
        for (const auto& p : m.content)
          if (p.kind != models::ContentPart::Kind::kText) {
            const models::Modality mod = models::modality_of(p.kind);
            if (!spec.takes(mod))
              throw Unimplemented("the model (" + spec.architecture + ") takes no " +
                                  models::modality_name(mod) + " input");
            parts.push_back(mod);
          }
      for (const models::Modality mod :
           {models::Modality::kImage, models::Modality::kVideo, models::Modality::kAudio}) {
        const auto n_parts = std::count(parts.begin(), parts.end(), mod);
        const auto n_items =
            std::count_if(s.media.begin(), s.media.end(),
                          [&](const PendingMedia& m) { return m.modality == mod; });
        if (n_parts != n_items)
          throw InvalidArgument("the messages hold " + count(n_parts, models::modality_name(mod)) +
                                " part(s) but " + count(n_items, models::modality_name(mod)) +
                                "(s) were attached");
      }
      for (size_t k = 0; k < parts.size(); ++k)
        if (parts[k] != s.media[k].modality)
          throw InvalidArgument("media item " + std::to_string(k) + " is a " +
                                models::modality_name(s.media[k].modality) +
                                " but its content part is a " + models::modality_name(parts[k]));
      r.prompt = processor.chat_ids(tok, s.messages);
      s.messages.clear();
    }
    if (r.prompt.empty()) throw InvalidArgument("the prompt is empty");
    s.unexpanded = r.prompt;
    // The media as its headers describe it: the prompt is laid out (placeholders expanded,
    // positions, content keys) before any pixel is decoded, so admission sees the exact prompt,
    // its prefix-cache and encoder-cache hits.
    std::vector<models::PreparedMedia> shells;
    std::vector<Hash128> keys;
    size_t at = 0;  // the item being read
    try {
      for (; at < s.media.size(); ++at) {
        PendingMedia& m = s.media[at];
        const models::MediaEstimate e = processor.estimate(m.modality, m.bytes, m.options);
        m.estimate = e;
        keys.push_back(key_of(m, r));
        std::optional<models::PreparedMedia> seen;
        if (!e.exact) seen = layouts.find(keys.back());
        m.layout_exact = e.exact || seen.has_value();
        shells.push_back(seen ? std::move(*seen) : models::layout_shell(m.modality, e));
      }
    } catch (const Error& err) {
      throw MediaFailure(err, at);
    }
    if (!shells.empty()) lay_out(r, s.unexpanded, std::move(shells), keys);
    s.to_preprocess.clear();
    for (size_t k = 0; k < s.media.size(); ++k) s.to_preprocess.push_back(k);
    expect_media(s, media_cost);
    r.max_total_tokens = spec.context_length;
    const bool exact = std::all_of(s.media.begin(), s.media.end(),
                                   [](const PendingMedia& m) { return m.layout_exact; });
    if (exact) check_fits(r);
  }

  Hash128 key_of(const PendingMedia& m, const Request& r) const {
    return media_cache_key(processor.content_key(m.modality, m.bytes, m.options), r.tenant_salt,
                           spec.encoder_precision);
  }

  // The expanded prompt and its media items from `items` (estimates or preprocessed).
  void lay_out(Request& r, const std::vector<int32_t>& ids,
               std::vector<models::PreparedMedia> items, const std::vector<Hash128>& keys) const {
    models::ExpandedPrompt e = processor.expand(ids, items);
    if (e.spans.size() != items.size())
      throw InternalError("the processor placed " + std::to_string(e.spans.size()) + " of " +
                          std::to_string(items.size()) + " media items");
    r.prompt = std::move(e.ids);
    r.positions = std::move(e.positions);
    r.rope_delta = e.rope_delta;
    r.media.clear();
    for (size_t i = 0; i < items.size(); ++i) {
      MediaItem m;
      m.modality = items[i].modality;
      m.key = keys[i];
      m.begin = e.spans[i].begin;
      m.n_tokens = e.spans[i].n_tokens;
      m.encoder_cost = items[i].encoder_cost;
      m.prepared = std::move(items[i]);
      r.media.push_back(std::move(m));
    }
  }

  // Decodes and preprocesses the media of an admitted request. The request itself is not
  // touched: the step loop reads admitted requests while their media is preprocessed (its queue
  // model); it applies the result (apply()).
  void preprocess(Submission& s, int lane) {
    Preprocessed& out = s.preprocessed;
    int64_t pixels = 0, local = 0, local_ns = 0;
    // With a remote encoder a request's items go out at once, each to the encode worker its key
    // picks, and are encoded side by side; one that does not come back is decoded here.
    const size_t n = s.to_preprocess.size();
    std::vector<std::optional<models::PreparedMedia>> remote(n);
    if (cfg.remote) {
      std::vector<std::future<std::optional<models::PreparedMedia>>> more;
      for (size_t j = 1; j < n; ++j)
        more.push_back(std::async(std::launch::async, [this, &s, j] {
          return encode_remotely(s, s.to_preprocess[j], j);
        }));
      if (n > 0) remote[0] = encode_remotely(s, s.to_preprocess[0], 0);
      for (size_t j = 1; j < n; ++j) remote[j] = more[j - 1].get();
    }
    size_t k = 0;  // the item being preprocessed
    try {
      for (size_t j = 0; j < n; ++j) {
        k = s.to_preprocess[j];
        const std::vector<uint8_t>& bytes = s.media.at(k).bytes;
        out.files.push_back(hash128(bytes.data(), bytes.size()));
        if (remote[j]) {
          out.items.push_back(std::move(*remote[j]));
          continue;
        }
        Stopwatch sw;
        const PendingMedia& m = s.media.at(k);
        pixels += m.estimate.source_pixels;
        ++local;
        if (sandbox) {
          sandbox::Job job;
          job.modality = m.modality;
          job.bytes = m.bytes;
          job.tenant = s.req->tenant;  // set at submit, never written after
          job.estimate = m.estimate;
          job.options = m.options;
          out.items.push_back(sandbox->preprocess(lane, job));
        } else {
          out.items.push_back(processor.preprocess(m.modality, m.bytes, cfg.media, m.options));
        }
        local_ns += static_cast<int64_t>(sw.millis() * 1e6);
      }
    } catch (const Error& err) {
      throw MediaFailure(err, k);
    }
    // The headers' pixel count, read at prepare (0 for audio: no pixels, no estimate).
    if (pixels > 0) media_cost.observe(local, pixels, static_cast<double>(local_ns));
    out.done_ns = now_ns();
  }

  // Item k of `s` from the remote encoder, checked against the item's layout; std::nullopt when
  // there is none, it declines or fails (the item is then decoded here).
  std::optional<models::PreparedMedia> encode_remotely(const Submission& s, size_t k, size_t slot) {
    if (!cfg.remote) return std::nullopt;
    const PendingMedia& m = s.media.at(k);
    const MediaItem& item = s.req->media.at(k);  // its key and layout: set before admission
    RemoteEncodeItem ask{m.modality,
                         m.bytes,
                         m.options,
                         item.key,
                         s.req->tenant,
                         spec.encoder_identity(),
                         s.req->deadline_ns,
                         item.n_tokens,
                         spec.embed_dim,
                         s.req->media.at(s.to_preprocess.at(0)).key,
                         slot};
    try {
      std::optional<models::PreparedMedia> p = cfg.remote->encode(ask);
      if (!p) {
        ++remote_declined;
        return std::nullopt;
      }
      const Tensor& e = p->encoded;
      if (e.rank() != 2 || e.dtype() != DType::kF32 || !e.on_host() || e.dim(0) != p->n_tokens ||
          e.dim(1) != spec.embed_dim || p->modality != m.modality ||
          (m.layout_exact && (p->n_tokens != item.n_tokens || p->dims != item.prepared.dims)))
        throw FormatError("the remote encoder answered " + e.describe() + " for a " +
                          models::modality_name(m.modality) + " item of " +
                          count(item.n_tokens, "tokens") + " x " + std::to_string(spec.embed_dim));
      ++remote_encoded;
      return p;
    } catch (const std::exception&) {
      ++remote_failed;  // the remote encoder logs its own failures
      return std::nullopt;
    }
  }

  // Its media is bad (the request fails) or the request is wrong, unsupported or cannot fit (it
  // is refused).
  void run(Submission* s, Phase phase, int lane) {
    try {
      if (phase == Phase::kPrepare)
        prepare(*s);
      else
        preprocess(*s, lane);
    } catch (const MediaFailure& err) {
      done(s, phase, Failure{Outcome::kFailed, err.code(), err.what(), err.item});
      return;
    } catch (const Error& err) {
      done(s, phase,
           Failure{err.code() == ErrorCode::kInternal ? Outcome::kFailed : Outcome::kRefused,
                   err.code(), err.what()});
      return;
    } catch (const std::exception& err) {
      done(s, phase, Failure{Outcome::kFailed, ErrorCode::kInternal, err.what()});
      return;
    }
    done(s, phase, std::nullopt);
  }
};

MediaStage::MediaStage(const models::ModelSpec& spec, const models::Processor& processor,
                       const io::Tokenizer& tok, const MediaStageConfig& cfg, Done done)
    : impl_(std::make_unique<Impl>(spec, processor, tok, cfg, std::move(done))) {
  Impl* m = impl_.get();
  const int lanes = std::max(1, cfg.media_threads);
  if (cfg.sandbox.enabled) m->sandbox = std::make_unique<sandbox::MediaSandbox>(cfg.sandbox, lanes);
  m->prepare_workers =
      std::make_unique<Workers>(1, [m](Submission* s, int) { m->run(s, Phase::kPrepare, 0); });
  m->media_workers = std::make_unique<Workers>(
      lanes, [m](Submission* s, int lane) { m->run(s, Phase::kPreprocess, lane); });
}

MediaStage::~MediaStage() {
  stop();
}

void MediaStage::stop() {
  impl_->prepare_workers->stop();  // first: its callbacks may still submit preprocessing
  impl_->media_workers->stop();
}

void MediaStage::apply(Submission& s) const {
  Request& r = *s.req;
  std::vector<models::PreparedMedia>& items = s.preprocessed.items;
  if (items.size() != s.to_preprocess.size())
    throw InternalError("preprocessing returned " + std::to_string(items.size()) + " of " +
                        std::to_string(s.to_preprocess.size()) + " media items");
  bool as_estimated = true;
  for (size_t j = 0; j < items.size(); ++j) {
    const size_t k = s.to_preprocess[j];
    MediaItem& m = r.media.at(k);
    const bool elsewhere = items[j].encoded_elsewhere();  // no encoder work left here
    as_estimated = as_estimated && items[j].dims == m.prepared.dims &&
                   items[j].n_tokens == m.n_tokens &&
                   (elsewhere || items[j].encoder_cost == m.encoder_cost) &&
                   items[j].kept_tokens == m.prepared.kept_tokens &&
                   items[j].slice_seconds == m.prepared.slice_seconds;
    r.media_decode_ns += items[j].decode_ns;
    r.media_resample_ns += items[j].resample_ns;
    if (!s.media[k].estimate.exact) impl_->layouts.put(m.key, items[j]);
    m.prepared = std::move(items[j]);
    m.file_hash = s.preprocessed.files.at(j);
    if (elsewhere) m.encoder_cost = m.prepared.encoder_cost = 0;
    m.features_skipped = false;
    s.media[k].bytes = {};  // decoded: the file is no longer needed
  }
  if (!as_estimated) {
    // The header told less than the decoder (not so for images): lay the prompt out again.
    std::vector<Hash128> keys;
    std::vector<models::PreparedMedia> all;
    std::vector<bool> skipped;
    std::vector<Hash128> files;
    for (MediaItem& m : r.media) {
      keys.push_back(m.key);
      all.push_back(std::move(m.prepared));
      skipped.push_back(m.features_skipped);
      files.push_back(m.file_hash);
    }
    impl_->lay_out(r, s.unexpanded, std::move(all), keys);
    for (size_t k = 0; k < r.media.size(); ++k) {
      r.media[k].features_skipped = skipped[k];
      r.media[k].file_hash = files[k];
    }
  }
  impl_->check_fits(r);  // again: the estimate may not have been exact
  r.media_pending = false;
  r.timeline.add(Event::kMediaDecoded, s.preprocessed.done_ns,
                 static_cast<int64_t>(s.to_preprocess.size()));
  s.preprocessed = Preprocessed{};
  s.to_preprocess.clear();
}

void MediaStage::prepare(Submission* s, size_t inline_bytes) {
  size_t bytes = s->prompt_text.size();
  for (const auto& msg : s->messages)
    for (const auto& part : msg.content) bytes += part.text.size();
  if (s->media.empty() && bytes <= inline_bytes)
    impl_->run(s, Phase::kPrepare, 0);
  else
    submit(s, Phase::kPrepare);
}

void MediaStage::submit(Submission* s, Phase phase) {
  (phase == Phase::kPrepare ? impl_->prepare_workers : impl_->media_workers)->push(s);
}

const MediaCostModel& MediaStage::media_cost() const {
  return impl_->media_cost;
}

int64_t MediaStage::skip_cached(Submission& s, const SchedulerView& books) const {
  Request& r = *s.req;
  const int64_t prefix = books.cached_prefix_tokens(r);
  s.to_preprocess.clear();
  int64_t skipped = 0;
  for (size_t k = 0; k < r.media.size(); ++k) {
    MediaItem& m = r.media[k];
    m.features_skipped = s.media.at(k).layout_exact &&
                         (m.begin + m.n_tokens <= prefix || books.encoder_cached(m.key));
    if (m.features_skipped)
      ++skipped;
    else
      s.to_preprocess.push_back(k);
  }
  expect_media(s, impl_->media_cost);
  return skipped;
}

int64_t MediaStage::unskip(Submission& s) const {
  s.to_preprocess.clear();
  for (size_t k = 0; k < s.req->media.size(); ++k)
    if (s.req->media[k].features_skipped) s.to_preprocess.push_back(k);
  expect_media(s, impl_->media_cost);
  return static_cast<int64_t>(s.to_preprocess.size());
}

sandbox::SandboxStats MediaStage::sandbox_stats() const {
  return impl_->sandbox ? impl_->sandbox->stats() : sandbox::SandboxStats{};
}

RemoteEncodeStats MediaStage::remote_stats() const {
  return {impl_->remote_encoded.load(), impl_->remote_declined.load(), impl_->remote_failed.load()};
}

void publish_text(Submission& s, const std::string& text) {
  if (text.empty() && s.req->generated() != 1) return;
  {
    std::lock_guard<std::mutex> lk(s.handle->mu);
    s.handle->result.text += text;  // the whole text, for wait()
  }
  // The log-probabilities of the tokens completed since the last event go with this text.
  std::vector<TokenLogprobs> lp;
  const auto& all = s.req->output_logprobs;
  if (s.logprobs_sent < all.size()) {
    lp.assign(all.begin() + static_cast<std::ptrdiff_t>(s.logprobs_sent), all.end());
    s.logprobs_sent = all.size();
  }
  const std::vector<int32_t>& out = s.req->output;
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(s.ids_sent), out.end());
  s.ids_sent = out.size();
  s.handle->push_text(text, std::move(lp), std::move(ids));
}

}  // namespace mmrt::engine

// oneDNN matmul back end: single-threaded primitives, cached per shape in the backend's GEMM
// state, each run in the calling pool thread with that thread's stream and scratchpad (so every
// pool thread can run them at once).
// Debian's oneDNN uses the OpenMP runtime; we set the calling thread's OpenMP team size to one
// so the library never starts threads that would compete with our pool for the cores.
#include <omp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/linear_impl.h"

namespace mmrt::kernels::detail {

namespace {

using dnnl::memory;

struct Prim {
  dnnl::matmul mm;
  memory::desc src, wei, dst, scratch;
  size_t scratch_bytes = 0;
  std::string impl;
};

// Key: (type, m, k, n, ldw, ldy, how W is stored).
using Key = std::tuple<GemmType, int64_t, int64_t, int64_t, int64_t, int64_t, WeightLayout>;

const char* type_name(GemmType t) {
  return t == GemmType::kBF16   ? "bf16"
         : t == GemmType::kS8   ? "s8"
         : t == GemmType::kU8S8 ? "u8 x s8"
                                : "f32";
}

std::shared_ptr<const Prim> make_prim(const dnnl::engine& eng, const Key& key) {
  const auto [type, m, k, n, ldw, ldy, layout] = key;
  const bool int8 = type == GemmType::kS8 || type == GemmType::kU8S8;
  const auto dt = type == GemmType::kBF16 ? memory::data_type::bf16
                  : int8                  ? memory::data_type::s8
                                          : memory::data_type::f32;
  auto p = std::make_shared<Prim>();
  p->src = memory::desc({m, k}, type == GemmType::kU8S8 ? memory::data_type::u8 : dt,
                        memory::dims{k, 1});  // [m, k] row-major
  // W [n, k] read as Wᵀ, W already [k, n], or blocked as the library's own bf16 / int8 layout
  p->wei = layout == WeightLayout::kBlocked ? memory::desc({k, n}, dt,
                                                           int8 ? memory::format_tag::BA16a64b4a
                                                                : memory::format_tag::BA16a64b2a)
           : layout == WeightLayout::kKN    ? memory::desc({k, n}, dt, memory::dims{ldw, 1})
                                            : memory::desc({k, n}, dt, memory::dims{1, ldw});
  p->dst = memory::desc({m, n}, int8 ? memory::data_type::s32 : memory::data_type::f32,
                        memory::dims{ldy, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->src, p->wei, p->dst), attr, eng);
  p->scratch = pd.scratchpad_desc();
  p->scratch_bytes = p->scratch.get_size();
  p->impl = pd.impl_info_str();
  // oneDNN falls back to its reference kernel where it has no optimised one for the types and
  // layouts asked (s8 x s8 on its blocked layout without AMX: 2,600x slower, measured). Never
  // run one: a silent fallback is a latency black hole.
  if (p->impl.find("ref") != std::string::npos)
    throw Unimplemented(std::string("oneDNN has only its reference kernel (") + p->impl +
                        ") for this " + type_name(type) + " matmul on this CPU");
  p->mm = dnnl::matmul(pd);
  return p;
}

std::shared_ptr<const Prim> prim_or_unimplemented(const dnnl::engine& eng, const Key& key) {
  try {
    return make_prim(eng, key);
  } catch (const dnnl::error& e) {
    throw Unimplemented(std::string("oneDNN cannot run this ") + type_name(std::get<0>(key)) +
                        " matmul here: " + e.what());
  }
}

struct ThreadState {
  std::unique_ptr<dnnl::stream> stream;
  std::shared_ptr<void> scratch;
  size_t scratch_bytes = 0;
};

}  // namespace

struct GemmState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mu;  // guards cache
  std::map<Key, std::shared_ptr<const Prim>> cache;
  std::vector<ThreadState> threads;  // [pool threads]: each touched only by its own thread

  std::shared_ptr<const Prim> get(const Key& key) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    auto p = prim_or_unimplemented(engine, key);
    cache.emplace(key, p);
    return p;
  }
};

std::unique_ptr<GemmState, GemmStateDeleter> make_gemm_state(int threads) {
  std::unique_ptr<GemmState, GemmStateDeleter> s(new GemmState);
  s->threads.resize(static_cast<size_t>(threads));
  return s;
}
void GemmStateDeleter::operator()(GemmState* s) const {
  delete s;
}

void gemm_libraries_single_threaded() {
  omp_set_num_threads(1);
}

void onednn_matmul(const CpuBackend& be, GemmType type, const void* x, int64_t m, int64_t k,
                   const void* w, int64_t n, int64_t ldw, void* y, int64_t ldy,
                   WeightLayout layout) {
  gemm_libraries_single_threaded();
  GemmState& gs = be.gemm_state();
  const auto prim =
      gs.get(Key{type, m, k, n, layout == WeightLayout::kBlocked ? 0 : ldw, ldy, layout});
  ThreadState& ts = gs.threads.at(static_cast<size_t>(be.pool().thread_index()));
  if (!ts.stream) ts.stream = std::make_unique<dnnl::stream>(gs.engine);
  if (!ts.scratch || ts.scratch_bytes < prim->scratch_bytes) {
    ts.scratch_bytes = std::max<size_t>(prim->scratch_bytes, 4096);
    ts.scratch = aligned_alloc_shared(ts.scratch_bytes);
  }
  memory src(prim->src, gs.engine, const_cast<void*>(x));
  memory wei(prim->wei, gs.engine, const_cast<void*>(w));
  memory dst(prim->dst, gs.engine, y);
  memory scr(prim->scratch, gs.engine, ts.scratch.get());
  prim->mm.execute(*ts.stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, wei},
                                {DNNL_ARG_DST, dst},
                                {DNNL_ARG_SCRATCHPAD, scr}});
  ts.stream->wait();
}

namespace {

bool native(GemmType type, WeightLayout layout = WeightLayout::kNK) {
  gemm_libraries_single_threaded();
  try {
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    // make_prim refuses a reference implementation (it would run, far too slowly).
    return prim_or_unimplemented(
               eng, Key{type, 32, 64, 64, layout == WeightLayout::kBlocked ? 0 : 64, 64, layout}) !=
           nullptr;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

// Properties of the CPU and the library, fixed for the process: computed once, never changed.
bool onednn_bf16_supported() {
  static const bool ok = native(GemmType::kBF16);
  return ok;
}
bool onednn_s8_supported() {
  static const bool ok = native(GemmType::kS8);
  return ok;
}
bool onednn_amx() {
  static const bool ok = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return ok;
}
bool onednn_u8s8_blocked_supported() {
  static const bool ok = native(GemmType::kU8S8, WeightLayout::kBlocked);
  return ok;
}

}  // namespace mmrt::kernels::detail

// oneDNN matmul back end: single-threaded primitives, cached per shape, each run in the calling
// pool thread with its own scratchpad (so any number of threads can run them at once).
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

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/linear_impl.h"

namespace mmrt::kernels::detail {

namespace {

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct Prim {
  dnnl::matmul mm;
  memory::desc src, wei, dst, scratch;
  size_t scratch_bytes = 0;
  std::string impl;
};

// Key: (bf16?, m, k, n, ldw, ldy).
using Key = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t>;

std::shared_ptr<const Prim> make_prim(const Key& key) {
  const auto [bf, m, k, n, ldw, ldy] = key;
  const auto dt = bf ? memory::data_type::bf16 : memory::data_type::f32;
  auto p = std::make_shared<Prim>();
  p->src = memory::desc({m, k}, dt, memory::dims{k, 1});    // [m, k] row-major
  p->wei = memory::desc({k, n}, dt, memory::dims{1, ldw});  // W [n, k] read as Wᵀ
  p->dst = memory::desc({m, n}, memory::data_type::f32, memory::dims{ldy, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->src, p->wei, p->dst), attr, cpu_engine());
  p->scratch = pd.scratchpad_desc();
  p->scratch_bytes = p->scratch.get_size();
  p->impl = pd.impl_info_str();
  p->mm = dnnl::matmul(pd);
  return p;
}

std::shared_ptr<const Prim> get_prim(const Key& key) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const Prim>> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::shared_ptr<const Prim> p;
  try {
    p = make_prim(key);
  } catch (const dnnl::error& e) {
    throw Unimplemented(std::string("oneDNN cannot run this ") +
                        (std::get<0>(key) ? "bf16" : "f32") + " matmul here: " + e.what());
  }
  cache.emplace(key, p);
  return p;
}

struct ThreadState {
  std::unique_ptr<dnnl::stream> stream;
  std::shared_ptr<void> scratch;
  size_t scratch_bytes = 0;
};

}  // namespace

void gemm_libraries_single_threaded() {
  omp_set_num_threads(1);
}

void onednn_matmul(bool is_bf16, const void* x, int64_t m, int64_t k, const void* w, int64_t n,
                   int64_t ldw, float* y, int64_t ldy) {
  gemm_libraries_single_threaded();
  const auto prim = get_prim(Key{is_bf16, m, k, n, ldw, ldy});
  thread_local ThreadState ts;
  if (!ts.stream) ts.stream = std::make_unique<dnnl::stream>(cpu_engine());
  if (!ts.scratch || ts.scratch_bytes < prim->scratch_bytes) {
    ts.scratch_bytes = std::max<size_t>(prim->scratch_bytes, 4096);
    ts.scratch = aligned_alloc_shared(ts.scratch_bytes);
  }
  auto& eng = cpu_engine();
  memory src(prim->src, eng, const_cast<void*>(x));
  memory wei(prim->wei, eng, const_cast<void*>(w));
  memory dst(prim->dst, eng, y);
  memory scr(prim->scratch, eng, ts.scratch.get());
  prim->mm.execute(*ts.stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, wei},
                                {DNNL_ARG_DST, dst},
                                {DNNL_ARG_SCRATCHPAD, scr}});
  ts.stream->wait();
}

bool onednn_bf16_supported() {
  static const bool ok = [] {
    gemm_libraries_single_threaded();
    try {
      const auto p = get_prim(Key{true, 32, 64, 64, 64, 64});
      // A reference implementation would run, but far too slowly to be worth choosing.
      return p->impl.find("ref") == std::string::npos;
    } catch (const Error&) {
      return false;
    }
  }();
  return ok;
}

}  // namespace mmrt::kernels::detail

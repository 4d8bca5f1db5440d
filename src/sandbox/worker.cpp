// The media worker: confines itself, then preprocesses one item per request until the server
// closes the socket.
#include <fcntl.h>
#include <linux/futex.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <string>

#include "core/error.h"
#include "media/image.h"
#include "models/registry.h"
#include "sandbox/media_sandbox.h"
#include "sandbox/wire.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MMRT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MMRT_SANITIZED 1
#endif
#endif

namespace mmrt::sandbox {

namespace {

// A field of /proc/self/status in bytes ("VmData:  1234 kB"). Sanitized builds set no memory
// limits from it.
[[maybe_unused]] int64_t status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':')
      return std::stoll(line.substr(n + 1)) * 1024;
  return 0;
}

void set_limit(int resource, rlim_t soft, rlim_t hard, const char* what) {
  const rlimit r{soft, hard};
  if (::setrlimit(resource, &r) != 0)
    throw Unavailable(std::string("media worker: cannot set ") + what + ": " +
                      std::strerror(errno));
}

// Resource limits, then the seccomp allow-list. After this the process can compute, map the
// buffers it was given and talk on its socket; anything else kills it.
void confine(const WorkerOptions& o) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    throw Unavailable(std::string("media worker: prctl failed: ") + std::strerror(errno));
  set_limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
  set_limit(RLIMIT_FSIZE, 0, 0, "RLIMIT_FSIZE");
  set_limit(RLIMIT_NOFILE, 16, 16, "RLIMIT_NOFILE");
  rlimit cur{};
  ::getrlimit(RLIMIT_STACK, &cur);
  const rlim_t stack = std::min<rlim_t>(cur.rlim_cur, rlim_t{8} << 20);
  set_limit(RLIMIT_STACK, stack, stack, "RLIMIT_STACK");
  // The server moves the soft CPU limit before every item (prlimit), up to the hard limit,
  // which ends the worker's life with SIGKILL even if it blocks SIGXCPU; it cannot raise either.
  ::getrlimit(RLIMIT_CPU, &cur);
  const rlim_t hard = std::min<rlim_t>(cur.rlim_max, static_cast<rlim_t>(o.lifetime_cpu_seconds));
  set_limit(RLIMIT_CPU, std::min<rlim_t>(static_cast<rlim_t>(o.cpu_seconds), hard), hard,
            "RLIMIT_CPU");
#ifndef MMRT_SANITIZED
  // Heap and private mappings beyond what loading needed; the address space also bounds the
  // shared buffers it may keep mapped. (Sanitizers reserve terabytes of shadow memory as
  // private mappings, so their builds run without these two limits.)
  const int64_t data = status_bytes("VmData") + o.memory_bytes;
  set_limit(RLIMIT_DATA, static_cast<rlim_t>(data), static_cast<rlim_t>(data), "RLIMIT_DATA");
  const int64_t as =
      status_bytes("VmSize") + o.memory_bytes + o.shared_bytes + (int64_t{256} << 20);
  set_limit(RLIMIT_AS, static_cast<rlim_t>(as), static_cast<rlim_t>(as), "RLIMIT_AS");
#endif

  scmp_filter_ctx f = ::seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (!f) throw Unavailable("media worker: seccomp_init failed");
  int rc = ::seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1);
  if (rc == 0) rc = ::seccomp_attr_set(f, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  auto allow = [&](int sys, unsigned n, const scmp_arg_cmp* args) {
    if (rc == 0) rc = ::seccomp_rule_add_array(f, SCMP_ACT_ALLOW, sys, n, args);
  };
  const scmp_arg_cmp on_sock = SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(o.fd));
  const scmp_arg_cmp no_exec = SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0);
  allow(SCMP_SYS(recvmsg), 1, &on_sock);
  allow(SCMP_SYS(sendmsg), 1, &on_sock);
  // Private anonymous memory, or a mapping of a buffer it was given (descriptors 4 and up);
  // never executable, never shared anonymous memory or a grows-down region (both would escape
  // RLIMIT_DATA).
  const scmp_arg_cmp anon_private[] = {
      no_exec,
      SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS | MAP_SHARED | MAP_GROWSDOWN, MAP_ANONYMOUS)};
  const scmp_arg_cmp file_backed[] = {no_exec,
                                      SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS | MAP_GROWSDOWN, 0),
                                      SCMP_A4(SCMP_CMP_GE, static_cast<scmp_datum_t>(o.fd + 1))};
  allow(SCMP_SYS(mmap), 2, anon_private);
  allow(SCMP_SYS(mmap), 3, file_backed);
  allow(SCMP_SYS(mprotect), 1, &no_exec);
  const scmp_arg_cmp self = SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(::getpid()));
  allow(SCMP_SYS(tgkill), 1, &self);  // abort()
  for (const int sys :
       {SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(brk), SCMP_SYS(madvise), SCMP_SYS(close),
        SCMP_SYS(futex), SCMP_SYS(clock_gettime), SCMP_SYS(gettid), SCMP_SYS(getpid),
        SCMP_SYS(sched_yield), SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigreturn),
        SCMP_SYS(restart_syscall), SCMP_SYS(exit), SCMP_SYS(exit_group)})
    allow(sys, 0, nullptr);
  // glibc's qsort asks sysinfo(2) for the physical memory size before sorting more than 1 KiB
  // (libvorbis sorts its codebooks while opening every Ogg Vorbis file). Read-only, no
  // arguments.
  allow(SCMP_SYS(sysinfo), 0, nullptr);
  // libsndfile probes every file it cannot place by its magic bytes (MP3 without an ID3 tag,
  // and after skipping one) for a Mac resource fork, opening paths it derives from the empty
  // name of our in-memory file ("/..namedfork/rsrc", ...). The open fails with EACCES instead
  // of killing the worker: nothing can be opened either way.
  if (rc == 0) rc = ::seccomp_rule_add(f, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(openat), 0);
  // FFmpeg's logger asks isatty(2) (ioctl TCGETS on stderr) before its first line, which it
  // prints for a damaged video: the call fails with ENOTTY (not a terminal) instead of killing
  // the worker. No other ioctl is answered.
  const scmp_arg_cmp ioctl_stderr = SCMP_A0(SCMP_CMP_EQ, 2);
  if (rc == 0) rc = ::seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), 1, ioctl_stderr);
#ifndef MMRT_SANITIZED
  // mpg123 (inside libsndfile) prints a warning on stderr for every damaged MP3 frame. The
  // write fails instead of killing the worker (and nothing reaches the server's log).
  const scmp_arg_cmp on_stderr = SCMP_A0(SCMP_CMP_EQ, 2);
  if (rc == 0) rc = ::seccomp_rule_add(f, SCMP_ACT_ERRNO(EBADF), SCMP_SYS(write), 1, on_stderr);
#endif
#ifdef MMRT_SANITIZED
  // The sanitizer runtimes probe memory through a pipe (pipe2, write, read), read limits and
  // set up signal stacks; sanitizer builds are test builds, and every other rule stays.
  const scmp_arg_cmp read_only = SCMP_A2(SCMP_CMP_EQ, 0);
  allow(SCMP_SYS(prlimit64), 1, &read_only);
  for (const int sys : {SCMP_SYS(pipe), SCMP_SYS(pipe2), SCMP_SYS(read), SCMP_SYS(write),
                        SCMP_SYS(getrlimit), SCMP_SYS(sched_getaffinity), SCMP_SYS(sigaltstack)})
    allow(sys, 0, nullptr);
#endif
  if (rc == 0) rc = ::seccomp_load(f);
  ::seccomp_release(f);
  if (rc != 0)
    throw Unavailable(std::string("media worker: cannot install the seccomp filter: ") +
                      std::strerror(-rc));
}

// Descriptors open now (the listing's own one excluded).
uint32_t open_descriptors() {
  std::error_code ec;
  uint32_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n > 0 ? n - 1 : 0;
}

struct Mapping {
  void* p = nullptr;
  size_t capacity = 0;
};

class Worker {
 public:
  Worker(const WorkerOptions& o, std::unique_ptr<models::Processor> p)
      : opts_(o), processor_(std::move(p)) {
    ctx_.isa = o.isa;
    ctx_.buffers = BufferCache::create(static_cast<size_t>(o.memory_bytes / 2));
  }

  // Until the server closes the socket (exit status 0) or sends something malformed (2).
  int serve() {
    for (;;) {
      wire::Request q;
      int fds[2] = {-1, -1}, n_fds = 0;
      const long n = wire::receive_message(opts_.fd, &q, sizeof q, fds, &n_fds);
      if (n == 0) return 0;
      if (n != static_cast<long>(sizeof q) || q.magic != wire::kMagic ||
          q.version != wire::kVersion || q.n_forget > wire::kMaxForget)
        return 2;
      for (uint32_t i = 0; i < q.n_forget; ++i) forget(q.forget[i]);
      int next = 0;
      bool ok = true;
      if (q.input.has_fd) ok = ok && adopt(q.input, next < n_fds ? fds[next++] : -1, PROT_READ);
      if (q.output.has_fd)
        ok = ok && adopt(q.output, next < n_fds ? fds[next++] : -1, PROT_READ | PROT_WRITE);
      if (!ok) return 2;
      wire::Reply r;
      r.id = q.id;
      run(q, r);
      if (!wire::send_message(opts_.fd, &r, sizeof r, {}, false)) return 0;
      if (opts_.test_hooks && q.hook == static_cast<uint32_t>(TestHook::kSpinAfterReply)) spin();
    }
  }

 private:
  bool adopt(const wire::SlotRef& s, int fd, int prot) {
    if (fd < 0 || s.capacity == 0) return false;
    void* p = ::mmap(nullptr, s.capacity, prot, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return false;
    forget(s.id);
    maps_[s.id] = {p, s.capacity};
    return true;
  }
  void forget(uint32_t id) {
    auto it = maps_.find(id);
    if (it == maps_.end()) return;
    ::munmap(it->second.p, it->second.capacity);
    maps_.erase(it);
  }

  [[noreturn]] static void spin() {
    volatile uint64_t i = 0;
    for (;;) i = static_cast<uint64_t>(i) + 1;
  }

  // A test's stand-in for an exploit; true when the reply is already written (forged).
  bool hook(uint32_t h, wire::Reply& r) {
    if (!opts_.test_hooks) return false;
    const int anon = MAP_PRIVATE | MAP_ANONYMOUS;
    switch (static_cast<TestHook>(h)) {
      case TestHook::kForbiddenSyscall:
        ::syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
        throw InternalError("socket(2) was not stopped by the seccomp filter");
      case TestHook::kExecMemory:
        ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, anon, -1, 0);
        throw InternalError("executable memory was not stopped by the seccomp filter");
      case TestHook::kSharedMemory:
        ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        throw InternalError("shared anonymous memory was not stopped by the seccomp filter");
      case TestHook::kGrowsDownMemory:
        ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, anon | MAP_GROWSDOWN, -1, 0);
        throw InternalError("a grows-down mapping was not stopped by the seccomp filter");
      case TestHook::kCrash:
        __builtin_trap();
      case TestHook::kSpin:
        spin();
      case TestHook::kCloseSocket: {
        ::close(opts_.fd);
        int word = 0;
        for (;;) ::syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
      }
      case TestHook::kForgedReply:
        r.dtype = static_cast<uint32_t>(DType::kF32);
        r.rank = 2;
        r.shape[0] = r.shape[1] = int64_t{1} << 32;  // 2^64 elements: 0 after a wrap
        r.output_bytes = 0;
        r.n_dims = 3;
        r.dims[0] = 1;
        r.dims[1] = r.dims[2] = int64_t{1} << 40;
        r.n_tokens = int64_t{1} << 50;
        return true;
      case TestHook::kNone:
      case TestHook::kSpinAfterReply:
        break;
    }
    return false;
  }

  void run(const wire::Request& q, wire::Reply& r) {
    try {
      if (hook(q.hook, r)) return;
      auto in = maps_.find(q.input.id), out = maps_.find(q.output.id);
      if (in == maps_.end() || out == maps_.end() || q.input_bytes > in->second.capacity)
        throw InternalError("media worker: a request named buffers it does not hold");
      if (q.modality > static_cast<uint32_t>(models::Modality::kAudio))
        throw InternalError("media worker: unknown modality");
      const Mapping o = out->second;
      media::MediaContext ctx = ctx_;
      ctx.features = [o](size_t bytes) {
        if (bytes > o.capacity)
          throw ResourceExhausted("the features need " + std::to_string(bytes) +
                                  " bytes, more than the header estimate's " +
                                  std::to_string(o.capacity));
        return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(o.p), [](uint8_t*) {});
      };
      const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(in->second.p),
                                           q.input_bytes);
      models::PreparedMedia p =
          processor_->preprocess(static_cast<models::Modality>(q.modality), bytes, ctx, q.options);
      const Tensor& t = p.features;
      if (t.rank() > wire::kMaxRank || p.dims.size() > wire::kMaxDims || !t.is_contiguous())
        throw InternalError("media worker: features of an unexpected layout " + t.describe());
      if (t.nbytes() > o.capacity)
        throw ResourceExhausted("the features need " + std::to_string(t.nbytes()) +
                                " bytes, more than the header estimate's " +
                                std::to_string(o.capacity));
      const size_t kept_bytes = p.kept_tokens.size() * sizeof(int32_t);
      if (kept_bytes > o.capacity - t.nbytes())
        throw ResourceExhausted("the kept token list does not fit the output buffer");
      if (t.raw() != o.p && t.nbytes() > 0) std::memcpy(o.p, t.raw(), t.nbytes());
      if (kept_bytes > 0)
        std::memcpy(static_cast<uint8_t*>(o.p) + t.nbytes(), p.kept_tokens.data(), kept_bytes);
      r.n_kept = p.kept_tokens.size();
      r.dtype = static_cast<uint32_t>(t.dtype());
      r.rank = static_cast<uint32_t>(t.rank());
      for (int i = 0; i < t.rank(); ++i) r.shape[i] = t.dim(i);
      r.n_dims = static_cast<uint32_t>(p.dims.size());
      for (size_t i = 0; i < p.dims.size(); ++i) r.dims[i] = p.dims[i];
      r.n_tokens = p.n_tokens;
      r.encoder_cost = p.encoder_cost;
      r.decode_ns = p.decode_ns;
      r.resample_ns = p.resample_ns;
      r.slice_seconds = p.slice_seconds;
      r.output_bytes = t.nbytes();
    } catch (const Error& e) {
      std::string m = e.what();
      if (e.code() == ErrorCode::kResourceExhausted && m.find("out of memory") != std::string::npos)
        m += " (the media worker's memory limit is " + std::to_string(opts_.memory_bytes >> 20) +
             " MiB, --media-memory-mb)";
      fail(r, e.code(), m.c_str());
    } catch (const std::bad_alloc&) {
      fail(r, ErrorCode::kResourceExhausted,
           ("out of memory: decoding needs more than the media worker's limit of " +
            std::to_string(opts_.memory_bytes >> 20) + " MiB")
               .c_str());
    } catch (const std::exception& e) {
      fail(r, ErrorCode::kInternal, e.what());
    }
  }
  static void fail(wire::Reply& r, ErrorCode code, const char* what) {
    r.status = wire::Status::kError;
    r.code = static_cast<int32_t>(code);
    wire::set_message(r.message, what);
  }

  WorkerOptions opts_;
  std::unique_ptr<models::Processor> processor_;
  media::MediaContext ctx_;
  std::map<uint32_t, Mapping> maps_;
};

}  // namespace

int run_media_worker(const WorkerOptions& opts) {
  wire::Ready ready;
  std::unique_ptr<models::Processor> processor;
  try {
    processor = models::load_processor(opts.model_dir);  // files are read before confinement
    ready.open_fds = open_descriptors();
    confine(opts);
  } catch (const Error& e) {
    ready.status = wire::Status::kError;
    ready.code = static_cast<int32_t>(e.code());
    wire::set_message(ready.message, e.what());
  } catch (const std::exception& e) {
    ready.status = wire::Status::kError;
    ready.code = static_cast<int32_t>(ErrorCode::kInternal);
    wire::set_message(ready.message, e.what());
  }
  if (!wire::send_message(opts.fd, &ready, sizeof ready, {}, false)) return 1;
  if (ready.status != wire::Status::kOk) return 1;
  Worker w(opts, std::move(processor));
  return w.serve();
}

}  // namespace mmrt::sandbox

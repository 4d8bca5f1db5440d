// Internal to src/sandbox/: the messages between the server and a media worker, fixed-size
// structs over a SOCK_SEQPACKET socketpair (one message per send), with the shared buffers'
// descriptors attached as SCM_RIGHTS the first time the worker sees each buffer. The server
// trusts nothing in a reply: every field is checked before it is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "models/model.h"

namespace mmrt::sandbox::wire {

constexpr uint32_t kMagic = 0x746d6d6d;  // "mmmt"
constexpr uint32_t kVersion = 5;
constexpr int kWorkerFd = 3;  // where the worker finds its socket
constexpr size_t kMaxForget = 8;
constexpr size_t kMessageBytes = 1024;
constexpr int kMaxRank = 4, kMaxDims = 8;

// A shared buffer: the server's id for it and its size. has_fd: its descriptor comes attached.
struct SlotRef {
  uint32_t id = 0;
  uint32_t has_fd = 0;
  uint64_t capacity = 0;
};

struct Request {
  uint32_t magic = kMagic, version = kVersion;
  uint64_t id = 0;
  uint32_t modality = 0;
  uint32_t hook = 0;  // TestHook
  SlotRef input, output;
  uint64_t input_bytes = 0;
  uint32_t forget[kMaxForget] = {};  // buffers the worker unmaps first
  uint32_t n_forget = 0;
  uint32_t reserved = 0;
  models::MediaOptions options;  // the item's (plain data: the worker is the same executable)
};
static_assert(std::is_trivially_copyable_v<models::MediaOptions>);

enum class Status : uint32_t { kOk = 0, kError = 1 };

struct Reply {
  uint32_t magic = kMagic;
  Status status = Status::kOk;
  uint64_t id = 0;
  int32_t code = 0;  // ErrorCode when status is kError
  uint32_t dtype = 0;
  uint32_t rank = 0, n_dims = 0;
  int64_t shape[kMaxRank] = {};
  int64_t dims[kMaxDims] = {};
  int64_t n_tokens = 0, encoder_cost = 0;
  int64_t decode_ns = 0, resample_ns = 0;  // as PreparedMedia's (the worker's own clock)
  double slice_seconds = 0;                // PreparedMedia::slice_seconds (a sampled video)
  uint64_t output_bytes = 0;               // features written at the start of the output buffer
  // PreparedMedia::kept_tokens: n_kept int32 indices right after the features (0: none pruned).
  uint64_t n_kept = 0;
  char message[kMessageBytes] = {};
};

// The worker's first message: confined and ready, or why it could not start.
struct Ready {
  uint32_t magic = kMagic, version = kVersion;
  Status status = Status::kOk;
  int32_t code = 0;
  uint32_t open_fds = 0;  // descriptors it held before confinement (the server wants 0-3)
  uint32_t reserved = 0;
  char message[kMessageBytes] = {};
};

// One message with up to 2 descriptors. Returns false when the peer is gone (EPIPE, ECONNRESET)
// or, with `nonblocking`, when its queue is full (a peer that stopped reading).
bool send_message(int fd, const void* msg, size_t bytes, std::span<const int> fds,
                  bool nonblocking);
// One message into `msg` (at most `bytes`); received descriptors (close-on-exec) into `fds`.
// Returns the message size, 0 at end of stream, -1 on an error (errno set). Descriptors beyond
// fds.size() are closed.
long receive_message(int fd, void* msg, size_t bytes, std::span<int> fds, int* n_fds);

// Copies `text` into a message field, cut to fit and always terminated.
void set_message(char (&dst)[kMessageBytes], const char* text);

}  // namespace mmrt::sandbox::wire

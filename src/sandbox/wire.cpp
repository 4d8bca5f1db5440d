#include "sandbox/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mmrt::sandbox::wire {

namespace {
constexpr int kMaxFds = 2;
}

bool send_message(int fd, const void* msg, size_t bytes, std::span<const int> fds,
                  bool nonblocking) {
  iovec iov{const_cast<void*>(msg), bytes};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    const size_t n = fds.size() > kMaxFds ? kMaxFds : fds.size();
    h.msg_control = control;
    h.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * n);
  }
  for (;;) {
    const ssize_t r = ::sendmsg(fd, &h, MSG_NOSIGNAL | (nonblocking ? MSG_DONTWAIT : 0));
    if (r == static_cast<ssize_t>(bytes)) return true;
    if (r < 0 && errno == EINTR) continue;
    return false;
  }
}

long receive_message(int fd, void* msg, size_t bytes, std::span<int> fds, int* n_fds) {
  iovec iov{msg, bytes};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  h.msg_control = control;
  h.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(fd, &h, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  int n = 0;
  if (r >= 0)
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int got;
        std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (static_cast<size_t>(n) < fds.size())
          fds[static_cast<size_t>(n++)] = got;
        else
          ::close(got);
      }
    }
  if (n_fds) *n_fds = n;
  return r;
}

void set_message(char (&dst)[kMessageBytes], const char* text) {
  std::strncpy(dst, text, kMessageBytes - 1);
  dst[kMessageBytes - 1] = '\0';
}

}  // namespace mmrt::sandbox::wire

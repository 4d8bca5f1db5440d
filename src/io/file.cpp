#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace mmrt::io {

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string too_large(const std::string& who, uint64_t size, const FileLimit& limit) {
  std::string m = who + " is " + std::to_string(size) + " bytes, over the " +
                  format_bytes(limit.max_bytes) + " limit";
  if (limit.option) m += std::string(" (raise it with ") + limit.option + ")";
  return m;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to `want` bytes into out[0..want) and returns how many arrived before end of file.
size_t read_all(int fd, char* out, size_t want, const std::string& who) {
  size_t got = 0;
  while (got < want) {
    const ssize_t r = ::read(fd, out + got, want - got);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      throw NotFound(who + ": read failed: " + std::strerror(errno));
    }
    got += static_cast<size_t>(r);
  }
  return got;
}

template <class Buf>
Buf read_regular(const std::string& path, const FileLimit& limit) {
  const std::string who = std::string(limit.what) + " '" + path + "'";
  if (path.empty()) throw InvalidArgument(std::string("empty path given for the ") + limit.what);
  Fd f;
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; the type is checked next
  // (reads of a regular file ignore the flag).
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (f.fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) throw NotFound(who + " does not exist");
    throw NotFound(who + " cannot be opened: " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw NotFound(who + ": stat failed: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw InvalidArgument(who + " is " + kind_of(st.st_mode) + ", not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > limit.max_bytes) throw ResourceExhausted(too_large(who, size, limit));
  Buf out(static_cast<size_t>(size), 0);
  const size_t got = read_all(f.fd, reinterpret_cast<char*>(out.data()), out.size(), who);
  out.resize(got);  // shrank while being read
  char extra;
  if (got == size && read_all(f.fd, &extra, 1, who) == 1)
    throw InvalidArgument(who + " grew while it was being read");
  return out;
}

}  // namespace

std::string format_bytes(uint64_t n) {
  char buf[64];
  if (n < 1024) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  } else {
    const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = static_cast<double>(n) / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) v /= 1024, ++u;
    std::snprintf(buf, sizeof buf, v < 10 && v != static_cast<int>(v) ? "%.1f %s" : "%.0f %s", v,
                  units[u]);
  }
  return buf;
}

std::string read_file(const std::string& path, const FileLimit& limit) {
  return read_regular<std::string>(path, limit);
}

std::vector<uint8_t> read_file_bytes(const std::string& path, const FileLimit& limit) {
  return read_regular<std::vector<uint8_t>>(path, limit);
}

std::string read_stdin(const FileLimit& limit) {
  const std::string who = std::string(limit.what) + " on standard input";
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const size_t got = read_all(STDIN_FILENO, buf, sizeof buf, who);
    if (out.size() + got > limit.max_bytes)
      throw ResourceExhausted(too_large(who, out.size() + got, limit) + "; stopped reading");
    out.append(buf, got);
    if (got < sizeof buf) return out;
  }
}

}  // namespace mmrt::io

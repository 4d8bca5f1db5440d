#include "local_server.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace mmrt::cli {
namespace {

size_t discard(char*, size_t s, size_t n, void*) {
  return s * n;
}

std::string tail_of(const std::string& path, size_t max) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  return s.size() > max ? s.substr(s.size() - max) : s;
}

}  // namespace

long http_get_status(const std::string& url, double timeout_s) {
  CURL* e = curl_easy_init();
  if (!e) return 0;
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_s * 1000));
  long code = 0;
  if (curl_easy_perform(e) == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(e);
  return code;
}

LocalServer::LocalServer(const std::string& model_dir, const std::vector<std::string>& extra,
                         const std::string& log_path, double ready_timeout_s)
    : log_(log_path) {
  std::vector<std::string> argv = {"mmrt",   "serve",     "--model", model_dir,
                                   "--host", "127.0.0.1", "--port",  "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw InvalidArgument("cannot write the server log " + log_path);
  // Everything the child needs is made before fork (the child only calls async-signal-safe
  // functions).
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(log_fd);
    throw Unavailable("cannot start a server process (fork failed)");
  }
  if (pid_ == 0) {
    // The server goes when verify goes, however verify ends (a CI timeout's SIGKILL included).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execv("/proc/self/exe", a.data());
    ::_exit(127);
  }
  ::close(log_fd);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(ready_timeout_s * 1000));
  const std::string marker = "listening on http://";
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw Unavailable("the local server exited before it was ready; its log (" + log_path +
                        ") ends:\n" + tail_of(log_path, 2000));
    }
    if (url_.empty()) {
      const std::string log = tail_of(log_path, 1 << 16);
      if (const size_t at = log.find(marker); at != std::string::npos) {
        const size_t end = log.find_first_of(" \n", at + marker.size() - 7);
        url_ = log.substr(at + marker.size() - 7, end - (at + marker.size() - 7));
      }
    }
    if (!url_.empty() && http_get_status(url_ + "/health", 1) == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop();
  throw Unavailable("the local server was not ready within " + std::to_string(ready_timeout_s) +
                    " s; its log (" + log_path + ") ends:\n" + tail_of(log_path, 2000));
}

void LocalServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 300; ++i) {  // its drain timeout, then some
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

LocalServer::~LocalServer() {
  stop();
}

}  // namespace mmrt::cli

// A `mmrt serve` child process on loopback for `mmrt verify --model DIR`: started on a free port,
// waited for until /health says ready, stopped with SIGTERM (its drain) when done.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace mmrt::cli {

class LocalServer {
 public:
  // Starts `mmrt serve --model DIR --host 127.0.0.1 --port 0 EXTRA...`, its stderr into
  // `log_path`, and waits up to `ready_timeout_s` for it to answer /health with 200.
  // Unavailable (with the log's last lines) when it exits or does not become ready.
  LocalServer(const std::string& model_dir, const std::vector<std::string>& extra,
              const std::string& log_path, double ready_timeout_s);
  ~LocalServer();  // stop()
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;
  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }
  void stop();

 private:
  pid_t pid_ = -1;
  std::string url_, log_;
};

// GET base_url + path: the HTTP status (0 when nothing answered) within timeout_s.
long http_get_status(const std::string& url, double timeout_s);

}  // namespace mmrt::cli

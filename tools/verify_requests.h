// The HTTP bodies of a `mmrt verify` schedule: OpenAI streamed chat requests with seeded prompt
// text, and images as data URLs (synthetic PNGs of the workload's sizes, or files of its image
// folders). Every body is a function of the schedule entry alone.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "verify/workload.h"

namespace mmrt::cli {

class VerifyRequests {
 public:
  // Lists the image folders the workload names (sorted; .jpg .jpeg .png .webp; at most 10,000
  // files each). NotFound / InvalidArgument naming the folder when it is missing or empty.
  explicit VerifyRequests(const verify::Workload& w);
  // Files per image source, in make_schedule's order (requests, then streams).
  std::vector<int64_t> image_counts() const;
  // The request body of one schedule entry. Not thread-safe (one builder thread).
  std::string body(const verify::Planned& p);

 private:
  std::string data_url(const verify::Planned& p);
  const verify::Workload& w_;
  std::vector<std::vector<std::string>> files_;  // per source
  std::map<std::string, std::string> urls_;      // recent data URLs by content key
};

}  // namespace mmrt::cli

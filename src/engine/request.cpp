#include "engine/request.h"

namespace mmrt::engine {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kNone:
      return "none";
    case Outcome::kFinished:
      return "finished";
    case Outcome::kStopped:
      return "stopped";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kFailed:
      return "failed";
  }
  return "?";
}

}  // namespace mmrt::engine

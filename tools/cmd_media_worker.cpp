// mmrt media-worker: the sandboxed media decoding process. The engine starts it (one per media
// lane) with its socket on descriptor 3; it is not meant to be run by hand.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "cli.h"
#include "core/error.h"
#include "sandbox/media_sandbox.h"

namespace {

using namespace mmrt;

int run(cli::Args& args) {
  sandbox::WorkerOptions o;
  o.model_dir = args.require("model");
  const std::string isa = args.get_or("isa", std::string(isa_name(best_isa())));
  const auto parsed = parse_isa(isa);
  if (!parsed) throw InvalidArgument("--isa: unknown kernel variant '" + isa + "'");
  o.isa = *parsed;
  o.memory_bytes =
      args.get_int("memory-bytes", o.memory_bytes, int64_t{16} << 20, int64_t{1} << 40);
  o.shared_bytes =
      args.get_int("shared-bytes", o.shared_bytes, int64_t{16} << 20, int64_t{1} << 40);
  o.cpu_seconds = static_cast<int32_t>(args.get_int("cpu-seconds", o.cpu_seconds, 1, 86400));
  o.lifetime_cpu_seconds = static_cast<int32_t>(
      args.get_int("lifetime-cpu-seconds", o.lifetime_cpu_seconds, 1, 1 << 30));
  o.test_hooks = args.flag("test-hooks");
  args.finish();
  o.fd = 3;
  if (::fcntl(o.fd, F_GETFD) < 0)
    throw FailedPrecondition(
        "mmrt media-worker is started by the engine (with its socket on descriptor 3), not by "
        "hand; see --media-sandbox in mmrt generate --help");
  const int rc = sandbox::run_media_worker(o);
  // No exit handlers: after confinement they could make system calls the filter forbids.
  std::fflush(stderr);
  ::_exit(rc);
}

MMRT_COMMAND(
    "media-worker", "(internal) the sandboxed media decoding process the engine starts",
    "usage: mmrt media-worker --model DIR [--isa NAME] [--memory-bytes N]\n"
    "                         [--shared-bytes N] [--cpu-seconds N]\n"
    "                         [--lifetime-cpu-seconds N] [--test-hooks]\n\n"
    "The media sandbox's worker process. The engine starts one per media lane (see\n"
    "--media-sandbox in mmrt generate --help) with a socket on descriptor 3; it loads the\n"
    "checkpoint's preprocessing settings, limits its memory, drops to a seccomp\n"
    "allow-list and decodes what the engine sends. Not meant to be run by hand.",
    {"test-hooks"}, &run);

}  // namespace

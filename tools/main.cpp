// mmrt: a latency-first multimodal inference server. Entry point and subcommand dispatch.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"

namespace {

void print_help() {
  std::printf(
      "mmrt - a latency-first inference server for multimodal language models\n\n"
      "usage: mmrt COMMAND [options]    (mmrt COMMAND --help for a command's options)\n\n"
      "commands:\n");
  for (const auto& [name, c] : mmrt::cli::commands())
    std::printf("  %-16s %s\n", name.c_str(), c.summary);
  std::printf(
      "\nenvironment:\n"
      "  MMRT_THREADS     compute threads when --threads is not given (default: all online\n"
      "                   CPUs)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("mmrt 0.1.0\n");
    return 0;
  }
  const auto& cmds = mmrt::cli::commands();
  auto it = cmds.find(argv[1]);
  if (it == cmds.end()) {
    std::fprintf(stderr, "mmrt: unknown command '%s' (see mmrt --help)\n", argv[1]);
    return 2;
  }
  const mmrt::cli::Command& cmd = it->second;
  std::vector<std::string> rest(argv + 2, argv + argc);
  for (const auto& a : rest) {
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", cmd.usage);
      return 0;
    }
  }
  try {
    mmrt::cli::Args args(rest, cmd.flags);
    return cmd.run(args);
  } catch (const mmrt::Error& e) {
    std::fprintf(stderr, "mmrt %s: error (%s): %s\n", cmd.name,
                 std::string(mmrt::error_code_name(e.code())).c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // Sizes from input are bounded before they allocate (docs/hostile-input.md); reaching this
    // means the machine itself ran short (e.g. a memory limit below the model's needs).
    std::fprintf(stderr,
                 "mmrt %s: error (resource_exhausted): out of memory: an allocation failed (is the "
                 "process's memory limit below what the model and --kv-mb need?)\n",
                 cmd.name);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mmrt %s: error: %s\n", cmd.name, e.what());
    return 1;
  }
}

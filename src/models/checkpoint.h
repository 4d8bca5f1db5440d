// Checking an opened checkpoint against the tensors a family expects, before any compute: every
// missing, unexpected, wrong-shape and unsupported-dtype tensor is listed (the first few of each,
// with counts) in one FormatError. And its tokenizer: loaded and checked against the vocabulary.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"

namespace mmrt::models {

struct ExpectedTensor {
  std::string name;  // as the checkpoint stores it
  Shape shape;
};

// `what` describes the layout for the message ("old-style names, tied lm_head"). Supported
// dtypes: F32, F16, BF16.
void check_checkpoint_tensors(const io::SafeTensors& st,
                              const std::vector<ExpectedTensor>& expected, const std::string& what);

// A JSON file of a checkpoint folder, read whole (io::read_text_file's limits).
struct CheckpointFile {
  std::string path, text;
};
// The checkpoint's preprocessor_config.json, or nullopt when it has none (the processor class's
// defaults apply then, as in transformers).
std::optional<CheckpointFile> read_preprocessor_config(const std::string& dir);

// The checkpoint's tokenizer.json (NotFound when it has none).
io::Tokenizer load_tokenizer(const std::string& dir);

// A cheap fingerprint of a checkpoint's weights: every *.safetensors file's name and size and
// 16 samples of 4 KiB spread over its bytes (64 KiB read per file). Two checkpoints of one
// config.json with different weights (another seed, a fine-tune) differ in it; it is not a
// proof of equality. Files that cannot be read leave their name and size in it.
Hash128 weights_fingerprint(const std::string& dir);
// FormatError when `tok` has ids the model has no embedding row for (id >= vocab_size): every
// request producing one would fail.
void check_tokenizer(const io::Tokenizer& tok, int64_t vocab_size, const std::string& dir);

// printf-style text for a line of `mmrt inspect` (cut at 319 bytes).
std::string inspect_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace mmrt::models

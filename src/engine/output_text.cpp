#include "engine/output_text.h"

#include "core/error.h"

namespace mmrt::engine {

OutputText::OutputText(const io::Tokenizer& tok, std::vector<std::string> stops)
    : tok_(tok), detok_(tok), stops_(std::move(stops)) {}

std::string OutputText::push(int32_t id) {
  if (stops_.finished() || id < 0 || id >= tok_.vocab_size()) return {};
  std::string piece;
  try {
    piece = detok_.push(id);
  } catch (const InvalidArgument&) {
    return {};  // an id the tokenizer leaves unassigned (a gap in its vocabulary)
  }
  return stops_.push(piece);
}

void OutputText::prime(std::span<const int32_t> ids) {
  for (int32_t id : ids) push(id);
}

std::string OutputText::finish() {
  std::string out;
  if (!stops_.finished()) out = stops_.push(detok_.flush());
  return out + stops_.flush();
}

}  // namespace mmrt::engine

// Fuyu's request side: the prompt (FuyuProcessor's order: every image's token grid, then BOS, the
// text and the beginning-of-answer marker <0x04>), image estimates from the header alone, decoding
// + the image processor's patches, |SPEAKER| expansion into the grid (plain 1-D positions) and
// content keys.
//
// A prepared image: features = patches f32 [rows * cols, 30*30*3] in (y, x, c) order, dims =
// {rows, cols}, n_tokens = rows * (cols + 1): each grid row is `cols` |SPEAKER| tokens whose
// embeddings the patches replace, then one |NEWLINE| token, which keeps its own embedding (the
// runner's encoder output carries it, so the engine replaces the item's whole run);
// encoder_cost = rows * cols (one matrix-multiply row a patch).
#pragma once

#include <memory>

#include "models/fuyu/config.h"
#include "models/fuyu/image_processor.h"
#include "models/model.h"

namespace mmrt::io {
class Tokenizer;
}

namespace mmrt::models::fuyu {

struct TokenIds {
  int32_t speaker = 71011;  // |SPEAKER|: the image placeholder, one per patch
  int32_t newline = 71019;  // |NEWLINE|: ends every grid row
  int32_t bos = 1;          // <s>: after the images, before the text
};

// The ids Fuyu's prompt is made of, looked up as vocabulary pieces in `tok` (|SPEAKER|,
// |NEWLINE|, <s>; the <0x04> piece its beginning-of-answer text must encode to is checked too).
// FormatError naming `origin` and the token it lacks.
TokenIds prompt_token_ids(const io::Tokenizer& tok, const std::string& origin);

// The grid of a prepared item from its dims; InvalidArgument when dims, token count or the
// features disagree.
ImageGeometry item_geometry(const PreparedMedia& item, int64_t patch_dim);

std::unique_ptr<Processor> make_processor(const Config& cfg, const ImageProcessorConfig& pp,
                                          const TokenIds& ids, const Hash128& config_key);

}  // namespace mmrt::models::fuyu

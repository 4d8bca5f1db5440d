// UTF-8 helpers, NFC normalisation, the GPT-2 byte-level alphabet and the pre-tokenizer regex
// shared by the tokenizer and the BPE trainer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace mmrt::io::unicode {

// The Qwen2 / Qwen2.5 / Qwen3 pre-tokenizer pattern (Split, behavior Isolated). Digits split one
// by one; `\s+(?!\S)` leaves the last space of a run to the following word.
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ---- UTF-8 -------------------------------------------------------------------------------------

// One step of UTF-8 decoding at the start of `s` (Unicode well-formedness table 3-7).
struct Utf8Step {
  enum Status : uint8_t { kOk, kInvalid, kTruncated };
  uint32_t cp = 0;   // the code point when kOk
  uint32_t len = 0;  // kOk: sequence length; kInvalid: length of the maximal ill-formed
                     // subpart (one U+FFFD); kTruncated: bytes of a valid but unfinished prefix
  Status status = kOk;
};
Utf8Step utf8_next(std::string_view s);

bool is_valid_utf8(std::string_view s);
// Replaces each maximal ill-formed subpart with U+FFFD (Python's errors="replace", WHATWG).
std::string sanitize_utf8(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Unicode White_Space property (what `\s` means in Hugging Face tokenizers' regex engine).
bool is_white_space(uint32_t cp);

// ---- NFC ---------------------------------------------------------------------------------------

// True when `s` (valid UTF-8) is certainly in NFC: no code point can decompose, reorder or
// compose. A false answer only means "run the full normaliser".
bool nfc_quick_check(std::string_view s);
// NFC of valid UTF-8 text (utf8proc); returns `s` unchanged when the quick check passes.
std::string nfc(std::string_view s);

// ---- GPT-2 byte-level alphabet -----------------------------------------------------------------

// bytes_to_unicode(): bytes 33..126, 161..172 and 174..255 map to themselves, the other 68 bytes
// to U+0100 + n in increasing byte order.
const std::array<uint32_t, 256>& byte_to_codepoint();
// The byte a code point stands for, or -1 when it is not in the byte-level alphabet.
int codepoint_to_byte(uint32_t cp);
// Maps every byte to its alphabet character (UTF-8 of the result).
std::string bytes_to_byte_level(std::string_view bytes);
// Inverse map; returns false (leaving `out` partly written) if `text` holds a character outside
// the alphabet or is not valid UTF-8.
bool byte_level_to_bytes(std::string_view text, std::string& out);

// ---- Pre-tokenizer regex -----------------------------------------------------------------------

// A PCRE2 pattern compiled once (UTF + UCP, JIT when available) and applied with "Isolated"
// behaviour: both the matches and the gaps between them become pieces. `\s` / `\S` are rewritten
// to \p{White_Space} / \P{White_Space} so whitespace means what it means in Hugging Face
// tokenizers (PCRE2's own \s also matches U+180E). Safe to use from several threads at once.
class SplitRegex {
 public:
  // Throws FormatError naming `origin` when the pattern does not compile.
  SplitRegex(std::string_view pattern, const std::string& origin);
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;
  ~SplitRegex();

  // Calls piece(begin, end) for every piece of `text` (valid UTF-8), in order, no empty pieces.
  void split(std::string_view text, const std::function<void(size_t, size_t)>& piece) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

}  // namespace mmrt::io::unicode

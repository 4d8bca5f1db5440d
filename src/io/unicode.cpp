// UTF-8, NFC, byte-level alphabet and the PCRE2 split regex (see unicode.h).
#include "io/unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/state_pool.h"

namespace mmrt::io::unicode {

// ---- UTF-8 -------------------------------------------------------------------------------------

Utf8Step utf8_next(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  Utf8Step r;
  if (n == 0) {
    r.status = Utf8Step::kTruncated;
    return r;
  }
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    r.cp = b0;
    r.len = 1;
    return r;
  }
  uint32_t need;                       // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    r.status = Utf8Step::kInvalid;  // 80..C1, F5..FF are never lead bytes
    r.len = 1;
    return r;
  }
  for (uint32_t k = 1; k <= need; ++k) {
    if (k >= n) {
      r.status = Utf8Step::kTruncated;
      r.len = k;
      return r;
    }
    const unsigned char b = p[k];
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      r.status = Utf8Step::kInvalid;
      r.len = k;
      return r;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  r.cp = cp;
  r.len = need + 1;
  return r;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    Utf8Step st = utf8_next(s.substr(i));
    if (st.status != Utf8Step::kOk) return false;
    i += st.len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    Utf8Step st = utf8_next(s.substr(i));
    if (st.status == Utf8Step::kOk) {
      out.append(s.data() + i, st.len);
    } else {
      out.append(kReplacementChar);
    }
    i += st.len;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// ---- NFC ---------------------------------------------------------------------------------------

namespace {

// A code point at or above U+0300 is "maybe not NFC-stable" when it has a canonical
// decomposition, a non-zero combining class, is a mark (every non-Hangul character that can be
// the second half of a canonical composition is a mark) or is a conjoining Hangul jamo.
bool nfc_maybe(uint32_t cp) {
  if (cp < 0x300) return false;  // NFC_Quick_Check is Yes and nothing composes below U+0300
  if (cp >= 0x1100 && cp <= 0x11FF) return true;
  if (cp >= 0xAC00 && cp <= 0xD7A3) return false;  // precomposed Hangul syllables
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  if (p->combining_class != 0) return true;
  if (p->category == UTF8PROC_CATEGORY_MN || p->category == UTF8PROC_CATEGORY_MC ||
      p->category == UTF8PROC_CATEGORY_ME)
    return true;
  if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return true;  // canonical
  return false;
}

}  // namespace

bool nfc_quick_check(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0xCC) {  // every code point below U+0300 starts with a byte below 0xCC
      ++i;
      continue;
    }
    Utf8Step st = utf8_next(s.substr(i));
    if (st.status != Utf8Step::kOk) return false;
    if (nfc_maybe(st.cp)) return false;
    i += st.len;
  }
  return true;
}

std::string nfc(std::string_view s) {
  if (nfc_quick_check(s)) return std::string(s);
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
      &dst, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    throw InvalidArgument(std::string("NFC normalisation failed: ") +
                          utf8proc_errmsg(static_cast<utf8proc_ssize_t>(n)));
  }
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

// ---- GPT-2 byte-level alphabet -----------------------------------------------------------------

namespace {

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // every alphabet code point is below U+0200
  std::array<std::string, 256> utf8;
  ByteMap() {
    from_cp.fill(-1);
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_cp[b] = printable ? b : 256 + extra++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
      append_utf8(utf8[b], to_cp[b]);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::array<uint32_t, 256>& byte_to_codepoint() {
  return byte_map().to_cp;
}

int codepoint_to_byte(uint32_t cp) {
  return cp < 512 ? byte_map().from_cp[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  const ByteMap& m = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += m.utf8[static_cast<unsigned char>(c)];
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  size_t i = 0;
  while (i < text.size()) {
    Utf8Step st = utf8_next(text.substr(i));
    if (st.status != Utf8Step::kOk) return false;
    const int b = codepoint_to_byte(st.cp);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += st.len;
  }
  return true;
}

// ---- Pre-tokenizer regex -----------------------------------------------------------------------

namespace {

// `\s` -> \p{White_Space}, `\S` -> \P{White_Space}; other escapes are copied unchanged.
std::string rewrite_whitespace_classes(std::string_view pat) {
  std::string out;
  out.reserve(pat.size() + 32);
  for (size_t i = 0; i < pat.size(); ++i) {
    if (pat[i] == '\\' && i + 1 < pat.size()) {
      const char e = pat[i + 1];
      if (e == 's') {
        out += "\\p{White_Space}";
      } else if (e == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += pat[i];
        out += e;
      }
      ++i;
    } else {
      out += pat[i];
    }
  }
  return out;
}

// Match data and JIT stack of one split() call, leased from the regex's pool and reused by later
// calls (PCRE2 match data is not thread-safe to share while matching; the compiled code is).
struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jstack = nullptr;
  MatchScratch() {
    md = pcre2_match_data_create(16, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jstack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (mctx && jstack) pcre2_jit_stack_assign(mctx, nullptr, jstack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jstack);
    pcre2_match_context_free(mctx);
    pcre2_match_data_free(md);
  }
};

}  // namespace

struct SplitRegex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  StatePool<MatchScratch> scratch;
  ~Code() { pcre2_code_free(code); }
};

SplitRegex::SplitRegex(std::string_view pattern, const std::string& origin)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  const std::string rewritten = rewrite_whitespace_classes(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw FormatError(origin + ": pre_tokenizer regex does not compile at offset " +
                      std::to_string(off) + ": " + reinterpret_cast<const char*>(msg) +
                      " (pattern: " + std::string(pattern) + ")");
  }
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;
SplitRegex::~SplitRegex() = default;

void SplitRegex::split(std::string_view text,
                       const std::function<void(size_t, size_t)>& piece) const {
  auto lease = code_->scratch.acquire();
  MatchScratch& s = *lease;
  if (!s.md) throw ResourceExhausted("pre-tokenizer: cannot allocate PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0, gap = 0;  // next search start; start of the not-yet-emitted gap
  while (pos < n) {
    int rc;
    if (code_->jit) {
      rc = pcre2_jit_match(code_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, s.md, s.mctx);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // pathological input: use the interpreter
        rc = pcre2_match(code_->code, subject, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, s.md,
                         nullptr);
      }
    } else {
      rc = pcre2_match(code_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, s.md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw InvalidArgument(std::string("pre-tokenizer regex failed on the input: ") +
                            reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: skip one character
      pos = b + std::max<uint32_t>(1, utf8_next(text.substr(b)).len);
      continue;
    }
    if (b > gap) piece(gap, b);
    piece(b, e);
    gap = pos = e;
  }
  if (gap < n) piece(gap, n);
}

}  // namespace mmrt::io::unicode

// UTF-8 replacement (checked against Python's errors="replace"), the NFC quick check (against
// utf8proc over every code point), the byte-level alphabet and the split regex.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <random>

#include "io/unicode.h"
#include "tokenizer_test_util.h"

using namespace mmrt;
namespace uc = mmrt::io::unicode;

namespace {

std::string cp_utf8(uint32_t cp) {
  std::string s;
  uc::append_utf8(s, cp);
  return s;
}

std::string utf8proc_map_str(const std::string& s, int options) {
  utf8proc_uint8_t* dst = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                        static_cast<utf8proc_ssize_t>(s.size()), &dst,
                        static_cast<utf8proc_option_t>(options));
  std::string out = n >= 0 ? std::string(reinterpret_cast<char*>(dst), size_t(n)) : "<error>";
  std::free(dst);
  return out;
}

std::vector<std::string> pieces(const uc::SplitRegex& re, const std::string& text) {
  std::vector<std::string> v;
  re.split(text, [&](size_t b, size_t e) { v.push_back(text.substr(b, e - b)); });
  return v;
}

}  // namespace

TEST(Unicode, NfcQuickCheckIsSafeForEveryCodePoint) {
  size_t checked = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = cp_utf8(cp);
    // A "yes" from the quick check must mean NFC leaves the character alone ...
    if (uc::nfc_quick_check(s)) {
      ASSERT_EQ(utf8proc_map_str(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE), s) << std::hex << cp;
      ++checked;
    }
    // ... and the last character of every composite that NFC recomposes (the part that composes
    // with what precedes it) must get a "maybe".
    const std::string nfd = utf8proc_map_str(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    if (nfd != s && nfd.size() > cp_utf8(uc::utf8_next(nfd).cp).size() &&
        utf8proc_map_str(nfd, UTF8PROC_STABLE | UTF8PROC_COMPOSE) == s) {
      size_t last = nfd.size() - 1;
      while (last > 0 && (static_cast<unsigned char>(nfd[last]) & 0xC0) == 0x80) --last;
      ASSERT_FALSE(uc::nfc_quick_check(nfd.substr(last))) << std::hex << cp;
    }
  }
  EXPECT_GT(checked, 1000000u);
  EXPECT_EQ(uc::nfc("e\xCC\x81"), "\xC3\xA9");
  EXPECT_EQ(uc::nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(uc::nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");  // reordered: ạ + acute
}

TEST(Unicode, ByteLevelAlphabet) {
  const auto& m = uc::byte_to_codepoint();
  EXPECT_EQ(m['!'], uint32_t('!'));
  EXPECT_EQ(m[' '], 0x120u);   // Ġ
  EXPECT_EQ(m['\n'], 0x10Au);  // Ċ
  EXPECT_EQ(m[0x00], 0x100u);
  EXPECT_EQ(m[0x7F], 0x121u);
  EXPECT_EQ(m[0xAD], 0x143u);  // soft hyphen is the last remapped byte
  EXPECT_EQ(m[0xFF], 0xFFu);
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  std::string back;
  ASSERT_TRUE(uc::byte_level_to_bytes(uc::bytes_to_byte_level(all), back));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(uc::byte_level_to_bytes("\xE4\xB8\xAD", back));  // 中 is not in the alphabet
}

TEST(Unicode, Qwen2SplitPattern) {
  const uc::SplitRegex re(uc::kQwen2SplitPattern, "test");
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(re, "Hello world  foo\n\nbar 123"),
            (V{"Hello", " world", " ", " foo", "\n\n", "bar", " ", "1", "2", "3"}));
  EXPECT_EQ(pieces(re, "don't I'LL it's"), (V{"don", "'t", " I", "'LL", " it", "'s"}));
  EXPECT_EQ(pieces(re, "x = a+b;\r\n\tif"), (V{"x", " =", " a", "+b", ";\r\n", "\tif"}));
  EXPECT_EQ(pieces(re, "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C"),  // 你好，
            (V{"\xE4\xBD\xA0\xE5\xA5\xBD", "\xEF\xBC\x8C"}));
  EXPECT_EQ(pieces(re, "a   "), (V{"a", "   "}));
  // White space is Unicode White_Space (as in Hugging Face tokenizers): U+0085 is space,
  // U+FEFF and U+180E are not. (JavaScript's \s differs on U+0085 and U+FEFF.)
  EXPECT_EQ(pieces(re, "!\xC2\x85x"), (V{"!", "\xC2\x85x"}));
  EXPECT_EQ(pieces(re, "!\xEF\xBB\xBFx"), (V{"!\xEF\xBB\xBF", "x"}));
  EXPECT_EQ(pieces(re, "!\xE1\xA0\x8Ex"), (V{"!\xE1\xA0\x8E", "x"}));
  // A whitespace run far longer than the JIT stack would hold in one frame.
  const std::string spaces(1 << 20, ' ');
  EXPECT_EQ(pieces(re, spaces + "x"), (V{std::string((1 << 20) - 1, ' '), " x"}));
  EXPECT_EQ(pieces(re, ""), V{});
}

// mmrt tokenize / mmrt detokenize: text <-> token ids with a model folder's tokenizer.json.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "core/error.h"
#include "io/file.h"
#include "io/json_fields.h"
#include "io/tokenizer.h"
#include "io/unicode.h"

namespace {

using namespace mmrt;
namespace fs = std::filesystem;

std::string read_stdin() {
  return io::read_stdin({.what = "input", .max_bytes = 256ull << 20});
}

io::Tokenizer load(cli::Args& args) {
  const std::string model = args.require("model");
  fs::path p(model);
  std::error_code ec;
  if (!fs::exists(p, ec))
    throw NotFound("--model " + model +
                   ": no such folder (expected a folder holding tokenizer.json)");
  if (fs::is_directory(p, ec)) p /= "tokenizer.json";
  return io::Tokenizer::from_file(p.string());
}

// A token's bytes as one quoted line: control characters escaped, bytes that are not (yet) a
// whole UTF-8 character shown as \xNN.
std::string readable(const std::string& bytes) {
  std::string out = "\"";
  size_t i = 0;
  while (i < bytes.size()) {
    const auto st = io::unicode::utf8_next(std::string_view(bytes).substr(i));
    if (st.status != io::unicode::Utf8Step::kOk) {
      for (uint32_t k = 0; k < st.len; ++k) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\x%02X", static_cast<unsigned char>(bytes[i + k]));
        out += hex;
      }
      i += st.len;
      continue;
    }
    switch (st.cp) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (st.cp < 0x20 || st.cp == 0x7F) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02X", st.cp);
          out += hex;
        } else {
          out.append(bytes, i, st.len);
        }
    }
    i += st.len;
  }
  return out + "\"";
}

// --jsonl: `one` maps each non-blank line of `text` (with its 1-based number) to one output line.
template <typename Fn>
std::string map_lines(const std::string& text, Fn&& one) {
  std::string out;
  size_t b = 0, line = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    ++line;
    const std::string_view l = std::string_view(text).substr(b, e - b);
    b = e + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    out += one(l, line) + "\n";
  }
  return out;
}

// --jsonl: one JSON string a line in, its ids as one JSON array a line out.
std::string tokenize_lines(const io::Tokenizer& tok, const std::string& text) {
  return map_lines(text, [&](std::string_view l, size_t line) {
    nlohmann::json j;
    try {
      j = io::parse_json(l, "stdin line " + std::to_string(line));
    } catch (const FormatError& err) {
      throw InvalidArgument(std::string(err.what()) + " (--jsonl expects one JSON string a line)");
    }
    if (!j.is_string())
      throw InvalidArgument("stdin line " + std::to_string(line) + ": " + io::json_excerpt(j) +
                            " is not a JSON string (--jsonl expects one a line)");
    return nlohmann::json(tok.encode(j.get<std::string>())).dump();
  });
}

int run_tokenize(cli::Args& args) {
  const bool ids_only = args.flag("ids-only");
  const bool jsonl = args.flag("jsonl");
  io::Tokenizer tok = load(args);
  args.finish();
  if (!args.positional().empty())
    throw InvalidArgument("tokenize reads its text from stdin; unexpected argument '" +
                          args.positional()[0] + "'");
  if (jsonl && ids_only) throw InvalidArgument("--jsonl and --ids-only do not go together");
  if (jsonl) {
    const std::string out = tokenize_lines(tok, read_stdin());
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const std::vector<int32_t> ids = tok.encode(read_stdin());
  std::string out;
  if (ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += std::to_string(ids[i]);
    }
    out += '\n';
  } else {
    for (int32_t id : ids) out += std::to_string(id) + "\t" + readable(tok.token_bytes(id)) + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

// Ids separated by white space and/or commas, or one JSON array.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    nlohmann::json j;
    try {
      j = io::parse_json(text, "stdin");
    } catch (const FormatError& e) {
      throw InvalidArgument(std::string(e.what()) + " (expected a JSON array of token ids)");
    }
    if (!j.is_array()) throw InvalidArgument("stdin: expected a JSON array of token ids");
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_number_integer())
        throw InvalidArgument("stdin: element " + std::to_string(i) + " of the JSON array (" +
                              io::json_excerpt(j[i]) + ") is not an integer token id");
      const int64_t v = j[i].get<int64_t>();
      if (v < INT32_MIN || v > INT32_MAX)
        throw InvalidArgument("token id " + std::to_string(v) + " is out of range");
      ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
  }
  size_t i = 0, n = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c)) || c == ',') {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < text.size() && !std::isspace(static_cast<unsigned char>(text[e])) && text[e] != ',')
      ++e;
    const std::string word = text.substr(i, e - i);
    ++n;
    size_t k = word[0] == '-' ? 1 : 0;
    bool numeric = k < word.size();
    for (; numeric && k < word.size(); ++k)
      numeric = std::isdigit(static_cast<unsigned char>(word[k])) != 0;
    if (!numeric)
      throw InvalidArgument("'" + word + "' (item " + std::to_string(n) +
                            " on stdin) is not a token id: expected integers separated by spaces "
                            "or commas, or a JSON array");
    const bool fits = word.size() - (word[0] == '-' ? 1 : 0) <= 10;
    const int64_t v = fits ? std::stoll(word) : INT64_MAX;
    if (v < INT32_MIN || v > INT32_MAX)
      throw InvalidArgument("token id " + word + " (item " + std::to_string(n) +
                            ") is out of range");
    ids.push_back(static_cast<int32_t>(v));
    i = e;
  }
  return ids;
}

// --jsonl: one JSON array of ids a line in, its text as one JSON string a line out.
std::string detokenize_lines(const io::Tokenizer& tok, const std::string& text, bool skip) {
  return map_lines(text, [&](std::string_view l, size_t line) {
    try {
      return nlohmann::json(tok.decode(parse_ids(std::string(l)), skip)).dump();
    } catch (const InvalidArgument& err) {
      throw InvalidArgument("stdin line " + std::to_string(line) + ": " + err.what());
    }
  });
}

int run_detokenize(cli::Args& args) {
  const bool skip_special = args.flag("skip-special");
  const bool jsonl = args.flag("jsonl");
  io::Tokenizer tok = load(args);
  args.finish();
  if (!args.positional().empty())
    throw InvalidArgument("detokenize reads its ids from stdin; unexpected argument '" +
                          args.positional()[0] + "'");
  if (jsonl) {
    const std::string out = detokenize_lines(tok, read_stdin(), skip_special);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const std::string text = tok.decode(parse_ids(read_stdin()), skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

MMRT_COMMAND("tokenize", "encode UTF-8 text from stdin into token ids",
             "usage: mmrt tokenize --model DIR [--ids-only | --jsonl] < text.txt\n\n"
             "Reads UTF-8 text from stdin (all of it, newlines included) and encodes it with\n"
             "DIR/tokenizer.json, a Hugging Face file: byte-level BPE (Qwen2/Qwen2.5/Qwen3:\n"
             "NFC, then the split regex), SentencePiece-style BPE with byte fallback (Llama,\n"
             "Mistral: spaces as U+2581, <0xNN> tokens for unknown characters) or Unigram\n"
             "(Fuyu: the best-scoring segmentation, <0xNN> fallback). Added/special\n"
             "tokens such as <|im_start|> or <s> are matched first. No special tokens are\n"
             "added (no BOS). Invalid UTF-8 is read as U+FFFD.\n\n"
             "options:\n"
             "  --model DIR   folder holding tokenizer.json (or the path of the file itself)\n"
             "  --ids-only    print one line of space-separated ids instead of the table\n"
             "  --jsonl       many texts: stdin holds one JSON string a line, and each gives\n"
             "                one line of output, the JSON array of its ids (blank lines are\n"
             "                skipped)\n\n"
             "output: one line per token, ID<TAB>\"TEXT\", where TEXT is the token's bytes\n"
             "with \\n, \\t, \\r, \\\" escaped and \\xNN for bytes that are only part of a\n"
             "UTF-8 character.\n\n"
             "example:\n"
             "  echo -n 'Hello world' | mmrt tokenize --model ckpt --ids-only",
             {"ids-only", "jsonl"}, run_tokenize);

MMRT_COMMAND("detokenize", "decode token ids from stdin into text",
             "usage: mmrt detokenize --model DIR [--skip-special] [--jsonl] < ids.txt\n\n"
             "Reads token ids from stdin, separated by white space and/or commas, or as one\n"
             "JSON array ([9707, 1879]), and prints the decoded text (no newline added).\n"
             "Bytes that do not form valid UTF-8 become U+FFFD.\n\n"
             "options:\n"
             "  --model DIR       folder holding tokenizer.json (or the path of the file itself)\n"
             "  --skip-special    drop special tokens (<|im_start|>, <|endoftext|>, ...)\n"
             "  --jsonl           many sequences: one JSON array of ids a line in, its text as\n"
             "                    one JSON string a line out (blank lines are skipped)\n\n"
             "errors: a non-numeric item or an id outside the vocabulary is reported with the\n"
             "offending value, and nothing is printed.\n\n"
             "example:\n"
             "  echo '9707 1879' | mmrt detokenize --model ckpt",
             {"skip-special", "jsonl"}, run_detokenize);

#!/usr/bin/env python3
"""Generates the tokenizer conformance corpus (deterministic: fixed seed, no inputs).

usage: gen_corpus.py OUT.jsonl [N_LINES]

Each output line is one JSON string (a test case; it may itself contain \\n, \\r, \\t). The cases
mix English, Chinese, Japanese, Korean, Arabic, emoji (ZWJ sequences, skin tones, flags,
keycaps), code, numbers, long whitespace runs, tabs, CRLF, Qwen special tokens inline, text that
NFC changes (decomposed accents, Hangul jamo, singletons, reordered marks), and odd characters
(U+FFFD, private use, lone combining marks, controls, zero-width characters).

Characters are drawn only from code points assigned in Unicode 14.0 (Python 3.11's unicodedata,
the version of Debian 12's PCRE2), so letter/number classes agree between the engines compared.
Two characters are left out on purpose because the JavaScript reference treats them differently
from Hugging Face tokenizers (documented in docs/tokenizer.md): U+0085 (NEL, White_Space in
Unicode but not in JavaScript's \\s) and U+FEFF (BOM, in JavaScript's \\s but not White_Space).
Lines where NFC does not commute with splitting out special tokens (a mark after '>' that
composes with it, e.g. U+0338) are regenerated, because decode(encode(x)) == NFC(x) is checked.
"""
import json
import random
import sys
import unicodedata

SEED = 20240607
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
           "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
           "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
           "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
           "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
           "<think>", "</think>"]
EXCLUDED = {"\u0085", "\ufeff"}

EN_WORDS = ("the of and to in is you that it he was for on are as with his they I at be this have "
            "from or one had by word but not what all were we when your can said there use an each "
            "which she do how their if will up other about out many then them these so some her "
            "would make like him into time has look two more write go see number no way could "
            "people my than first water been call who oil its now find long down day did get come "
            "made may part latency server token image video model inference throughput request "
            "Qwen vision encoder decoder attention cache GPU CPU tensor batch stream OpenAI JSON "
            "don't can't won't it's I'm you're we've they'll she'd HE'S WE'RE YOU'VE I'LL SHE'D "
            "naïve café résumé coöperate Zürich São Paulo Ærøskøbing façade jalapeño").split()
ZH = ("的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可"
      "她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同"
      "三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名"
      "定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内"
      "加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原"
      "车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战"
      "干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连"
      "远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转"
      "量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找"
      "友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离"
      "虽坏兴推")
ZH_PUNCT = "，。！？；：、「」『』（）《》【】…—·"
HIRA = [chr(c) for c in range(0x3041, 0x3097)]
KATA = [chr(c) for c in range(0x30A1, 0x30FB)] + ["ー"]
JA_PUNCT = "。、「」・！？〜"
AR_LETTERS = [chr(c) for c in range(0x0621, 0x064B)]
AR_MARKS = [chr(c) for c in range(0x064B, 0x0653)]
AR_DIGITS = [chr(c) for c in range(0x0660, 0x066A)]
EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "✨", "❤️", "👍", "🎉", "🙈", "🍣", "🐍", "🦀", "🌍",
         "☕", "⚡", "✅", "❌", "📷", "🎥", "🧠", "💡", "🫠", "🪐", "©️", "™️", "☺️"]
SKIN = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
SKIN_BASE = ["👋", "👍", "🙏", "💪", "🧑", "👩", "👨", "🤝", "✋", "👶"]
ZWJ_SEQ = ["👨\u200d👩\u200d👧\u200d👦", "👩\u200d💻", "🧑\u200d🚀", "🏳️\u200d🌈", "🏳️\u200d⚧️",
           "👁️\u200d🗨️", "🧑🏽\u200d🤝\u200d🧑🏿", "👩🏻\u200d❤️\u200d💋\u200d👨🏾", "🐻\u200d❄️",
           "❤️\u200d🔥", "🧔🏻\u200d♂️", "👨\u200d👨\u200d👦"]
FLAGS = ["🇺🇸", "🇨🇳", "🇯🇵", "🇰🇷", "🇩🇪", "🇫🇷", "🇸🇦", "🇧🇷", "🇪🇺"]
KEYCAPS = [d + "\ufe0f\u20e3" for d in "0123456789#*"]
ODD = ["\ufffd", "\ue000", "\uf8ff", "\U000f0000", "\U0010fffd", "\u200b", "\u200c", "\u200d",
       "\u200e", "\u200f", "\u2060", "\u00ad", "\u2028", "\u2029", "\u00a0", "\u3000", "\u2003",
       "\u180e", "\x00", "\x01", "\x07", "\x1b", "\x1f", "\x7f", "\u0301", "\u0308", "\u20dd",
       "\ufe0f", "\ufffe", "\uffff", "\U0001d400", "\U0001f9ff", "\u0e3f", "\u2603", "\u00bd",
       "\u2167", "\u00b2", "\uff10", "\uff21", "\u0130", "\u0131", "\u017f", "\u212a", "\ufb01"]
WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0", "\u3000",
      "\u2009", "\x0b", "\x0c", " \t \n"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "const x = await fetch(`/v1/chat?id=${id}`);\r\n",
    "if __name__ == '__main__':\n    main()\n",
    "#include <vector>\nint main() { std::vector<int> v{1,2,3}; }\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n",
    "x = {'a': 1, \"b\": [2, 3.5e-7, None]}\n",
    "    # indented comment\n        deeper = True\n",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }\n",
    "<div class=\"row\"><img src=\"a.png\" alt='x'/></div>\n",
    "$ curl -s http://localhost:8080/health | jq .status\n",
    "a+=b**2//3%4^5&6|7~8<<9>>10;\n",
    "    \n\t\n  \t  return;\n",
    "// TODO(someone): fix   this\t\t\n",
    "print(f\"{x!r:>10}\")\n",
]


def assigned(cp):
    if cp >= 0xD800 and cp <= 0xDFFF:
        return False
    c = chr(cp)
    return unicodedata.category(c) != "Cn" and c not in EXCLUDED


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        # Pools of assigned code points for the random "fuzz" lines (BMP and supplementary).
        self.bmp = [cp for cp in range(0x20, 0x10000) if assigned(cp)]
        self.supp = [cp for cp in range(0x10000, 0x30000) if assigned(cp)]
        # Precomposed characters whose NFD differs (for decomposed-Unicode lines).
        self.decomposable = [chr(cp) for cp in range(0xC0, 0x2000)
                             if assigned(cp) and unicodedata.normalize("NFD", chr(cp)) != chr(cp)]
        self.marks = [chr(cp) for cp in range(0x300, 0x370) if assigned(cp)]

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def en(self):
        n = self.r.randint(3, 25)
        words = [self.pick(EN_WORDS) for _ in range(n)]
        if self.r.random() < 0.5:
            words[0] = words[0].capitalize()
        s = " ".join(words)
        if self.r.random() < 0.3:
            s += self.pick([",", ";", " -", ":"]) + " " + self.num()
        return s + self.pick([".", "!", "?", "...", "", "\"", "'s", " :)"])

    def num(self):
        k = self.r.randrange(9)
        if k == 0:
            return str(self.r.randrange(10 ** self.r.randint(1, 25)))
        if k == 1:
            return f"{self.r.uniform(-1e6, 1e6):.{self.r.randint(0, 8)}f}"
        if k == 2:
            return f"{self.r.randrange(10**7):,}"
        if k == 3:
            return f"{self.r.uniform(0, 10):.3e}"
        if k == 4:
            return "+1 (555) 0" + str(self.r.randrange(10**6)).zfill(6)
        if k == 5:
            return "".join(chr(0xFF10 + self.r.randrange(10)) for _ in range(self.r.randint(1, 6)))
        if k == 6:
            return "".join(self.pick("²³¹¼½¾ⅠⅡⅢⅫ①②⑳") for _ in range(self.r.randint(1, 4)))
        if k == 7:
            return f"{self.r.randrange(2000, 2030)}-{self.r.randint(1, 12):02d}-{self.r.randint(1, 28):02d}"
        return "v" + ".".join(str(self.r.randrange(20)) for _ in range(3))

    def zh(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            out.append("".join(self.pick(ZH) for _ in range(self.r.randint(2, 30))))
            out.append(self.pick(ZH_PUNCT))
        if self.r.random() < 0.3:
            out.insert(self.r.randrange(len(out)), self.pick([" GPU ", "Qwen2-VL", " 2024年", "3.14"]))
        return "".join(out)

    def ja(self):
        out = []
        for _ in range(self.r.randint(2, 10)):
            pool = self.pick([HIRA, KATA, list(ZH)])
            out.append("".join(self.pick(pool) for _ in range(self.r.randint(1, 8))))
            if self.r.random() < 0.3:
                out.append(self.pick(JA_PUNCT))
        return "".join(out)

    def ko(self):
        words = []
        for _ in range(self.r.randint(2, 12)):
            words.append("".join(chr(0xAC00 + self.r.randrange(11172))
                                 for _ in range(self.r.randint(1, 5))))
        s = " ".join(words) + self.pick([".", "?", "!", ""])
        if self.r.random() < 0.35:  # decomposed Hangul: NFC recomposes the jamo
            s = unicodedata.normalize("NFD", s)
        return s

    def ar(self):
        words = []
        for _ in range(self.r.randint(2, 12)):
            w = ""
            for _ in range(self.r.randint(2, 7)):
                w += self.pick(AR_LETTERS)
                if self.r.random() < 0.3:
                    w += self.pick(AR_MARKS)
            words.append(w)
        if self.r.random() < 0.4:
            words.append("".join(self.pick(AR_DIGITS) for _ in range(self.r.randint(1, 5))))
        return " ".join(words) + self.pick(["؟", "،", ".", ""])

    def emoji(self):
        out = []
        for _ in range(self.r.randint(1, 10)):
            k = self.r.randrange(6)
            if k == 0:
                out.append(self.pick(EMOJI))
            elif k == 1:
                out.append(self.pick(SKIN_BASE) + self.pick(SKIN))
            elif k == 2:
                out.append(self.pick(ZWJ_SEQ))
            elif k == 3:
                out.append(self.pick(FLAGS))
            elif k == 4:
                out.append(self.pick(KEYCAPS))
            else:
                out.append(self.pick(EN_WORDS))
            out.append(self.pick(["", " ", "  ", "\n", "!"]))
        return "".join(out)

    def code(self):
        s = "".join(self.pick(CODE) for _ in range(self.r.randint(1, 3)))
        if self.r.random() < 0.3:
            s = s.replace("\n", "\r\n")
        if self.r.random() < 0.3:
            s = s.replace("    ", "\t")
        return s

    def whitespace(self):
        out = []
        for _ in range(self.r.randint(1, 6)):
            k = self.r.randrange(5)
            if k == 0:
                out.append(" " * self.r.randint(1, 300))
            elif k == 1:
                out.append("\t" * self.r.randint(1, 20))
            elif k == 2:
                out.append("".join(self.pick(WS) for _ in range(self.r.randint(1, 12))))
            elif k == 3:
                out.append("\r\n" * self.r.randint(1, 5))
            else:
                out.append(self.pick(EN_WORDS))
        return "".join(out)

    def special(self):
        k = self.r.randrange(4)
        if k == 0:
            role = self.pick(["system", "user", "assistant"])
            return f"<|im_start|>{role}\n{self.en()}<|im_end|>\n<|im_start|>assistant\n"
        if k == 1:
            return (self.en() + "<|vision_start|>" + "<|image_pad|>" * self.r.randint(1, 5) +
                    "<|vision_end|>" + self.zh())
        if k == 2:  # partial, nested and adjacent look-alikes
            bits = [self.pick(SPECIAL), "<|im_start", "im_end|>", "<|", "|>", "<<|endoftext|>|>",
                    "< |im_end| >", "<think>" + self.en() + "</think>", " " + self.pick(SPECIAL),
                    self.pick(SPECIAL) + " ", "<|IM_START|>", "<|box_start|>(10,20),(30,40)<|box_end|>"]
            return "".join(self.pick(bits) for _ in range(self.r.randint(1, 6)))
        parts = [self.fragment() for _ in range(self.r.randint(1, 4))]
        return self.pick(SPECIAL).join(parts)

    def decomposed(self):
        out = []
        for _ in range(self.r.randint(2, 12)):
            k = self.r.randrange(6)
            if k == 0:
                out.append(unicodedata.normalize("NFD", self.pick(self.decomposable)))
            elif k == 1:  # base + several marks in non-canonical order (NFC reorders)
                out.append(self.pick("aeiouAEIOUnzyc") + "".join(
                    self.pick(self.marks) for _ in range(self.r.randint(1, 4))))
            elif k == 2:  # singletons and compatibility-looking characters NFC maps
                out.append(self.pick(["\u212b", "\u2126", "\u212a", "\uf900", "\uf9d1", "\u0340",
                                      "\u0344", "\u1fee", "\u0374", "\u037e", "\u0387"]))
            elif k == 3:  # Vietnamese with stacked diacritics, decomposed
                out.append(unicodedata.normalize("NFD", self.pick(
                    ["Tiếng Việt", "người", "được", "những", "phở bò", "Hà Nội"])))
            elif k == 4:  # Devanagari nukta (composition exclusions) and Indic vowel signs
                out.append(self.pick(["\u0915\u093c", "\u0921\u093c\u0940", "\u0bc6\u0bbe",
                                      "\u0b47\u0b3e", "\u09c7\u09be", "हिन्दी"]))
            else:
                out.append(self.pick(EN_WORDS))
            out.append(self.pick(["", " ", " ", "-"]))
        return "".join(out)

    def odd(self):
        out = []
        for _ in range(self.r.randint(1, 12)):
            k = self.r.randrange(3)
            if k == 0:
                out.append(self.pick(ODD))
            elif k == 1:
                out.append(self.pick(self.marks))  # lone combining marks, also at line start
            else:
                out.append(self.pick(EN_WORDS + ["'s", "'T", "'Re", "'ll", "'D", "'ve", "'M"]))
            out.append(self.pick(["", " ", "'"]))
        return "".join(out)

    def fuzz(self):
        n = self.r.randint(1, 40)
        out = []
        for _ in range(n):
            pool = self.supp if self.r.random() < 0.2 else self.bmp
            out.append(chr(self.pick(pool)))
            if self.r.random() < 0.15:
                out.append(self.pick(WS))
        return "".join(out)

    def fragment(self):
        return self.pick([self.en, self.zh, self.ja, self.ko, self.ar, self.emoji, self.num,
                          self.code, self.whitespace, self.decomposed, self.odd])()

    def mixed(self):
        return self.pick(["", " ", "\n"]).join(
            self.fragment() for _ in range(self.r.randint(2, 5)))

    def line(self):
        kinds = [(self.en, 14), (self.zh, 8), (self.ja, 6), (self.ko, 6), (self.ar, 6),
                 (self.emoji, 8), (self.code, 8), (self.num, 4), (self.whitespace, 6),
                 (self.special, 10), (self.decomposed, 8), (self.odd, 6), (self.fuzz, 6),
                 (self.mixed, 10)]
        total = sum(w for _, w in kinds)
        x = self.r.randrange(total)
        for fn, w in kinds:
            if x < w:
                return fn()
            x -= w
        raise AssertionError


def split_specials(s):
    """Leftmost-longest split on the added tokens (the same rule the tokenizers use)."""
    out, i, start = [], 0, 0
    while i < len(s):
        best = None
        for t in SPECIAL:
            if s.startswith(t, i) and (best is None or len(t) > len(best)):
                best = t
        if best:
            out.append(s[start:i])
            out.append(best)
            i += len(best)
            start = i
        else:
            i += 1
    out.append(s[start:])
    return out


def nfc_commutes(s):
    parts = split_specials(s)
    return unicodedata.normalize("NFC", s) == "".join(
        p if p in SPECIAL else unicodedata.normalize("NFC", p) for p in parts)


def main():
    out_path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
    g = Gen(SEED)
    lines = []
    # A few fixed edge cases first, then generated lines.
    fixed = ["", " ", "\n", "\r\n", "a", "'s", "'S", "don't", "I'LL", "  leading", "trailing  ",
             "a  b", "a   \n b", "x\t\ty", "\n\n\n", " \n \n", "1234567890", "3.14159",
             "<|im_start|>", "<|im_start|><|im_end|>", "<|endoftext|>hello", "hello<|endoftext|>",
             "<|im_start", "é", "e\u0301", "\u1100\u1161\u11a8", "👨\u200d👩\u200d👧", "\ufffd",
             " " * 1000 + "x", "\t" * 64, "ab" * 500]
    for s in fixed:
        lines.append(s)
    while len(lines) < n:
        s = g.line()
        if any(c in EXCLUDED for c in s) or not nfc_commutes(s):
            continue
        lines.append(s)
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        for s in lines:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

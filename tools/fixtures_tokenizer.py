"""Tokenizer fixture: token ids that llama.cpp gives for 200+ varied strings.

write_tokenizer_fixture(llm, path) is called by make_fixtures.py with a llama_cpp.Llama loaded with
vocab_only=True. It writes

  {"meta": {...}, "cases": [{"text": str, "ids": [int], "parse_special": bool}, ...]}

where ids = llm.tokenize(text.encode(), add_bos=False, special=parse_special). Most cases use
parse_special=True (as a chat prompt is tokenized); a few repeat special-token strings with False.
meta.eog_ids lists every id llama.cpp treats as end-of-generation.

Run alone: python tools/fixtures_tokenizer.py MODEL.gguf OUT.json
"""
import json
import os
import sys

import llama_cpp

SPECIAL_STRINGS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "text before<|endoftext|>text after",
    "<|im_start|><|im_end|><|im_start|>",
    "<|im_start|> spaced <|im_end|>",
    "  <|im_end|>  ",
    "<|im_start|<|im_end|>|>",
    "<|im_end|><|endoftext|><|im_start|>",
    "<|im_start|>user\n12345<|im_end|>",
    "<|im_start|>assistant\n```python\nprint('hi')\n```<|im_end|>",
    "<repo_name>squeeze<file_sep>main.cpp<filename>",
    "<jupyter_start><jupyter_code>x = 1<jupyter_output>1<empty_output>",
    "<|im_start",
    "im_end|>",
    "<|IM_START|>",
    "< |im_start| >",
]

ENGLISH = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "hello",
    "HELLO",
    "Hello",
    "hElLo WoRlD",
    "I'm sure it's fine, isn't it? They're here; we've seen 'em. I'll go, he'd say.",
    "IT'S WE'RE THEY'VE I'M YOU'LL HE'D DON'T",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock 'n' roll",
    "''quoted'' and \"double\" and `back`",
    "Mr. Smith went to Washington, D.C., on Jan. 5th.",
    "e.g. i.e. etc. vs. a.m. p.m.",
    "state-of-the-art well-known self-driving",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old woman.",
    "What are three tips for staying healthy?",
    "Translate to French: The weather is nice today.",
    "A", "a", "Z", "z", "I", "x y z",
    "supercalifragilisticexpialidocious",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "antidisestablishmentarianism " * 3,
    "a" * 100,
    "ab" * 60,
    "The the THE tHe",
    "New York City's mayor",
    "email: someone@example.com, web: https://www.example.org/path?q=1&r=2#frag",
    "C:\\Users\\name\\Documents\\file.txt",
    "/usr/local/bin/python3 --version",
    "$100.00 + 15% tax = $115.00",
    "#hashtag @mention ~tilde ^caret |pipe",
]

CODE = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n",
    "for i in range(10):\n\tprint(i)\n",
    "#include <stdio.h>\nint main(void) {\n    printf(\"Hello, %s!\\n\", \"world\");\n    return 0;\n}\n",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};\nauto x = v[0] << 2;",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
    "const f = async (a, b) => { await fetch(`/api/${a}`); return a ?? b; };",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;",
    "<html><body><div class=\"main\">Hi &amp; bye</div></body></html>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "x+=1;y-=2;z*=3;w/=4;a%=5;b&=6;c|=7;d^=8;e<<=1;f>>=2;",
    "if (a && b || !c) { return a != b ? a : b; }",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "public static void main(String[] args) { System.out.println(args.length); }",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done\n",
    "    indented with four spaces",
    "\t\tindented with tabs",
    "        \n        \n",
    "x = [i**2 for i in range(100) if i % 3 == 0]",
    "// comment\n/* block\n   comment */\n",
    "a->b->c; p::q::r; x.y.z;",
    "0x1F 0b1010 0o777 1e-10 3.14159f 42u 1_000_000",
    "==== ---- ____ **** //// \\\\\\\\ ....",
    "!!!???...,,,;;;:::",
    "(((nested))) [[[brackets]]] {{{braces}}}",
    "```\ncode block\n```",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
]

UNICODE = [
    "café résumé naïve façade jalapeño",
    "Ångström Øre Æsir ß straße",
    "e\u0301 combining acute, a\u0308 combining diaeresis",
    "\u00e9 vs e\u0301",
    "Здравствуй, мир! Как дела?",
    "Привет",
    "Γειά σου Κόσμε",
    "שלום עולם",
    "مرحبا بالعالم",
    "السلام عليكم ورحمة الله",
    "नमस्ते दुनिया",
    "हिन्दी भाषा",
    "你好，世界！",
    "我爱自然语言处理。",
    "こんにちは世界、カタカナとひらがな",
    "안녕하세요 세계",
    "สวัสดีชาวโลก",
    "Xin chào thế giới",
    "Tiếng Việt có dấu",
    "ᚠᛇᚻ᛫ᛒᛦᚦ",
    "😀",
    "😀😃😄😁",
    "Hello 👋 world 🌍!",
    "👨‍👩‍👧‍👦 family",
    "👩🏽‍💻 coder",
    "🏳️‍🌈 flag",
    "🇫🇷🇩🇪🇯🇵",
    "❤️ ✨ ☃ ★ ♠ ♥",
    "∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ ≠ ∞",
    "½ ¾ ⅓ ① ② Ⅻ ⁵ ₂",
    "٠١٢٣٤٥٦٧٨٩",
    "१२३४५",
    "１２３ ＡＢＣ ｱｲｳ",
    "€£¥₹₿ ©®™ §¶†‡",
    "“smart quotes” ‘single’ — em dash – en dash … ellipsis",
    "«guillemets» ‹single›",
    "\u00a0non-breaking\u00a0space",
    "zero\u200bwidth\u200cjoiners\u200d",
    "ideographic\u3000space",
    "en\u2002em\u2003thin\u2009spaces",
    "line\u2028separator\u2029paragraph",
    "soft\u00adhyphen",
    "\u0085next line",
    "\ufeffBOM at start",
    "private \ue000 use",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙",
    "𠀀𠀁 rare CJK",
    "\U0001fae8 newer emoji",
    "\U00011f04\U00011f05 Kawi letters",
    "\U00011f50\U00011f51 Kawi digits",
    "\U0001e4d0\U0001e4f0 Nag Mundari",
    "\u0378 unassigned",
    "control\x01\x02\x1f chars",
    "bell\x07 and escape\x1b[0m",
    "null\x00byte",
    "\x7f delete",
    "ÿþý",
    "Ā ā Ġ ġ",
]

WHITESPACE = [
    "", " ", "  ", "   ", "    ", " " * 16, " " * 33,
    "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", "\t", "\t\t", "\t\n", "\n\t",
    " \n", "\n ", " \n ", "  \n  ", "\n \n", " \t \n \r ",
    " leading space", "  two leading", "trailing space ", "trailing two  ",
    " both ", "  both two  ", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a\nb", "a\n\nb",
    "a \nb", "a\n b", "a \n b", "word\n\n\n\nword", "  \t  word", "word  \t  ",
    "hello\u3000world", "x \u00a0 y", "\v\f vertical tab and form feed",
    "end with newline\n", "\nstart with newline",
]

NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
    "3.14159", "-273.15", "+1", "1,000,000", "1.000.000,50", "2024-01-15", "12:34:56",
    "1st 2nd 3rd 4th", "v1.2.3", "a1b2c3", "abc123def", "123abc", "x86_64", "ISO-8601",
    "555-1234", "(555) 123-4567", "1e10", "0.0001", "99%", "3/4", "10^6", "2**32",
    " 1", "  12", " 123 ", "1 2 3 4 5", "1\n2\n3",
]


def _generated():
    out = []
    for n in range(1, 26):
        out.append("".join(str((i * 7 + 3) % 10) for i in range(n)))
    for n in [1, 2, 3, 5, 8, 13]:
        out.append("x" + " " * n + "y")
        out.append(" " * n + "z")
        out.append("z" + " " * n)
        out.append("a" + "\n" * n + "b")
    out.append(" ".join(["word"] * 50))
    out.append("The quick brown fox. " * 20)
    return out


def fixture_strings():
    """(text, parse_special) pairs, deduplicated in order."""
    cases = []
    for s in ENGLISH + CODE + UNICODE + WHITESPACE + NUMBERS + _generated() + SPECIAL_STRINGS:
        cases.append((s, True))
    for s in SPECIAL_STRINGS[:8]:
        cases.append((s, False))
    seen = set()
    unique = []
    for c in cases:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


def eog_ids(llm):
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    return [i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)]


def write_tokenizer_fixture(llm, path):
    cases = []
    for text, parse_special in fixture_strings():
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=parse_special)
        cases.append({"text": text, "ids": [int(i) for i in ids], "parse_special": parse_special})
    meta = {
        "llama_cpp_python": llama_cpp.__version__,
        "model": os.path.basename(llm.model_path),
        "add_bos": False,
        "eog_ids": eog_ids(llm),
    }
    # One case per line, so a change in llama.cpp's output reads as a small diff.
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"meta": ' + json.dumps(meta, ensure_ascii=False) + ',\n "cases": [\n')
        f.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"tokenizer: {len(cases)} strings -> {path}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
    write_tokenizer_fixture(model, sys.argv[2])

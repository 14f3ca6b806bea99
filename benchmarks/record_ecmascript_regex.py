"""Record what llama-quantize's regular expression engine (C++ ``std::regex``, ECMAScript, libstdc++)
says about generated ``--tensor-type`` expressions and tensor names: tests/data/ecmascript_regex/cases.json.

Each case is an expression (marked ``usual`` when made of the usual constructs alone, no trick)
and, for each of a fixed list of names, whether ``std::regex_search``
finds it there, or the error ``std::regex`` refused the expression with. tests/test_ecmascript.py
checks that gguf_schema.tools.ecmascript matches exactly the same names, or refuses the expression.

    python benchmarks/record_ecmascript_regex.py [--count 1500] [--seed 38]

Needs g++ (libstdc++). The program is compiled into a temporary folder and fed the cases on stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "ecmascript_regex"

PROGRAM = r"""
#include <iostream>
#include <regex>
#include <string>
#include <vector>
int main() {
    std::string count_line, line;
    std::getline(std::cin, count_line);
    size_t n = std::stoul(count_line);
    std::vector<std::string> names(n);
    for (auto & s : names) std::getline(std::cin, s);
    while (std::getline(std::cin, line)) {
        try {
            std::regex rx(line);
            std::string out;
            for (auto & s : names) out += std::regex_search(s, rx) ? '1' : '0';
            std::cout << out << "\n";
        } catch (const std::regex_error & e) {
            std::cout << "E " << e.code() << "\n";
        }
    }
}
"""

NAMES = [
    "blk.0.attn_v.weight",
    "blk.12.ffn_down.weight",
    "blk.3.ffn_up_exps.weight",
    "output.weight",
    "token_embd.weight",
    "blk.7.attn_q.weight",
    "cls.output.weight",
    "blk.10.ffn_gate_shexp.weight",
    "blk.1.attn_k.weight",
    "per_layer_token_embd.weight",
    "enc.blk.2.attn_o.weight",
    "blk.99.ffn_down_exps.weight",
    "a",
    "",
    "blk.x.attn_v.weight",
    "BLK.0.ATTN_V.WEIGHT",
    "blk.5\r.x",
    "t\u00e9st.weight",
    "a-b_c.d",
    "[x]",
    "{2}",
    "a+b",
    "aaa",
    "ab",
    "a\tb",
    "q8_0",
    "blk.0.attn_v.weightweight",
]

ATOMS = [
    "blk",
    "attn",
    "ffn",
    "down",
    "up",
    "_",
    "\\.",
    ".",
    "v",
    "[0-9]",
    "[[:digit:]]",
    "[[:alpha:]]",
    "[[:alnum:]_]",
    "[^.]",
    "\\d",
    "\\w",
    "\\s",
    "\\D",
    "[a-z]",
    "weight",
    "exps",
    "[[:punct:]]",
    "[[:space:]]",
    "[[:upper:]]",
    "[[:xdigit:]]",
    "[[:lower:]]",
    "\\b",
    "\\B",
    "a",
    "é",
    "\\t",
    "-",
    "[-a]",
    "[\\]]",
    "\\x41",
    "[[:w:]]",
    "[[:blank:]]",
    "[[:cntrl:]]",
    "[[:print:]]",
    "[[:graph:]]",
    "[^[:digit:]]",
]
TRICKS = [
    "$",
    "^",
    "\\A",
    "\\Z",
    "[]a]",
    "a*+",
    "(?P<n>a)",
    "(?i)a",
    "(a)\\1",
    "(a)?b\\1",
    "[[=a=]]",
    "[[.a.]]",
    "a{",
    "a{,2}",
    "}",
    "]",
    "\\a",
    "\\e",
    "\\0",
    "\\012",
    "[z-a]",
    "(?<=a)b",
    "(?=a)*",
    "\\cA",
    "\\u0041",
    "[\\d-z]",
    "*",
    "(",
    ")",
    "\\",
    "[",
    "a**",
    "a{2}{3}",
    "\\z",
    "[[:foo:]]",
    "\\N",
    "a|*",
]
QUANT = ["", "", "", "*", "+", "?", "{2}", "{1,}", "{0,2}", "*?", "+?"]


def expression(rng: random.Random) -> tuple[str, bool]:
    """An expression, and whether it was made of the usual constructs alone (no trick)."""
    parts = []
    usual = True
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.12:
            parts.append(rng.choice(TRICKS))
            usual = False
        elif r < 0.22:
            inner = "".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 2)))
            alt = "".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 2)))
            kind = rng.choice(["(", "(?:", "(?=", "(?!"])
            body = inner + rng.choice(["|" + alt, ""])
            if kind in ("(?=", "(?!") and ("\\b" in body or "\\B" in body):
                usual = False  # a word boundary in a lookahead: libstdc++'s own reading, refused
            parts.append(kind + body + ")")
        else:
            parts.append(rng.choice(ATOMS))
        parts[-1] += rng.choice(QUANT)
    text = "".join(parts)
    if rng.random() < 0.2:
        text = "^" + text
    if rng.random() < 0.2:
        text += "$"
    return text, usual


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=38)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    made = [expression(rng) for _ in range(args.count)]
    usual = {e for e, u in made if u}
    exprs = list(dict.fromkeys(TRICKS + [e for e, _ in made]))
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "rx.cpp"), os.path.join(d, "rx")
        Path(src).write_text(PROGRAM)
        subprocess.run(["g++", "-O1", "-std=c++17", src, "-o", exe], check=True)
        gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
        feed = "\n".join([str(len(NAMES)), *NAMES, *exprs]) + "\n"  # one per line: no name holds a newline
        out = subprocess.run([exe], input=feed.encode(), capture_output=True, check=True).stdout.decode().splitlines()
    names = list(NAMES)
    cases = []
    for e, line in zip(exprs, out, strict=True):
        if line.startswith("E "):
            cases.append({"expression": e, "error": int(line[2:])})
        else:
            cases.append({"expression": e, "matches": line, "usual": e in usual})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cases.json").write_text(json.dumps({"engine": gxx, "names": names, "cases": cases}, indent=0) + "\n")
    print(f"{len(cases)} expressions, {sum('error' in c for c in cases)} refused by std::regex ({gxx})")


if __name__ == "__main__":
    main()

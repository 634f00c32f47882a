#!/usr/bin/env python3
"""Fails on C++ functions longer than LIMIT lines in the project's non-test .cc files.

A function's length is the number of lines from its opening brace to its closing one, both
included. Tests (*_test.cc) and fuzz targets (fuzz/, *_fuzzer.cc) are left out: a test reads
best as one straight story, and a fuzz target's body is its input grammar.

The scan matches braces after blanking comments, string and character literals and
preprocessor lines; it does not parse C++. A brace opens a function body when, at namespace
or class scope, the text before it ends like a declarator: `)` followed by qualifiers
(const, override, noexcept, a trailing return type) or a constructor's initializer list.
Lambdas inside a function count toward that function; a lambda at namespace scope or in a
table's initializer counts as a function of its own.

  tools/check_function_length.py            check (exit 1 and list the offenders)
  tools/check_function_length.py --list N   print every function over N lines, longest first
"""
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT = 120
# Functions over LIMIT that are waiting to be split, as "path:name". The list only shrinks: a
# function named here that has been split must leave it (the check says so).
KNOWN_LONG = set()


def sources():
    """The non-test .cc files under ROOT, outside bazel-* output links, .git and fuzz/."""
    out = []
    for d, dirs, files in os.walk(ROOT):
        rel = pathlib.Path(d).relative_to(ROOT).as_posix()
        dirs[:] = [x for x in dirs if not x.startswith(("bazel-", ".git"))
                   and not (rel == "." and x == "fuzz")]
        out += [pathlib.Path(d) / f for f in files
                if f.endswith(".cc") and not f.endswith(("_test.cc", "_fuzzer.cc"))]
    return sorted(out)


RAW = re.compile(r'R"([^(\s]{0,16})\(')


def blank(text):
    """`text` with comments, literals and preprocessor lines replaced by spaces (newlines
    kept, so offsets map to the same lines)."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                j = j + 2 if text[j] == "\\" else j + 1
            wipe(i, min(j, n))
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t":
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == "R" and RAW.match(text, i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = RAW.match(text, i)
            end = text.find(")" + m.group(1) + '"', m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            wipe(i, end)
            i = end
        elif c in "\"'":
            if c == "'" and i and text[i - 1].isalnum():  # digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            wipe(i, min(j + 1, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


SCOPE = re.compile(r"^(template\s*<.*>\s*)?(inline\s+)?(namespace|class|struct|union|enum|extern)\b", re.S)
ACCESS = re.compile(r"^\s*(public|private|protected)\s*:")
DECLARATOR = re.compile(
    r"\)\s*(?:const\b|volatile\b|override\b|final\b|mutable\b|noexcept\b(?:\s*\([^()]*\))?|&&?|\s)*"
    r"(?:->[^{};]*)?$", re.S)
CTOR_INIT = re.compile(r"\)\s*:[^:]", re.S)
NAME = re.compile(r"([~\w:]+(?:<[^()]*>)?|operator\s*\S+?)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)", re.S)


def is_function(header):
    if DECLARATOR.search(header):
        return True
    return bool(CTOR_INIT.search(header)) and header.endswith(("}", ")"))


def function_name(header):
    m = NAME.search(header)
    if not m:
        return "(lambda)"
    name = m.group(1).split("<")[0]
    return name if name not in ("[]", "") else "(lambda)"


def functions(text):
    """(name, first line, length in lines) for each function body in `text`."""
    code = blank(text)
    stack = []  # kinds: "scope", "init", "func", "block"
    out = []
    hdr = 0
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
            continue
        in_func = any(k[0] in ("func", "block") for k in stack)
        if c == "{":
            if in_func:
                stack.append(("block", line, ""))
                continue
            header = ACCESS.sub("", code[hdr:i]).strip()
            if stack and stack[-1][0] == "init":
                # Inside a braced initializer: an element that ends like a declarator is a
                # lambda, anything else is a nested initializer.
                kind = "func" if DECLARATOR.search(header) else "init"
                stack.append((kind, line, header))
                if kind == "init":
                    hdr = i + 1
                continue
            if SCOPE.match(header) and not DECLARATOR.search(header):
                stack.append(("scope", line, header))
            elif is_function(header):
                stack.append(("func", line, header))
            else:
                stack.append(("init", line, header))
            hdr = i + 1
        elif c == "}":
            if not stack:
                continue
            kind, start, header = stack.pop()
            if kind == "func":
                out.append((function_name(header), start, line - start + 1))
            if kind == "init" and not (stack and stack[-1][0] == "init"):
                continue  # a member's braced initializer: the declarator goes on
            if not any(k[0] in ("func", "block") for k in stack):
                hdr = i + 1
        elif c == ";" and not in_func:
            hdr = i + 1
        elif c == "," and stack and stack[-1][0] == "init":
            hdr = i + 1
    return out


def main():
    args = sys.argv[1:]
    limit = LIMIT
    listing = False
    if args[:1] == ["--list"]:
        listing = True
        limit = int(args[1]) if len(args) > 1 else LIMIT
    long = []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        for name, start, length in functions(path.read_text(errors="replace")):
            if length > limit:
                long.append((length, rel, start, name))
    long.sort(key=lambda x: (-x[0], x[1], x[2]))
    if listing:
        for length, rel, start, name in long:
            print(f"{length:5d}  {rel}:{start}  {name}")
        return 0
    new = [x for x in long if f"{x[1]}:{x[3]}" not in KNOWN_LONG]
    split = sorted(KNOWN_LONG - {f"{x[1]}:{x[3]}" for x in long})
    if new:
        print(f"check_function_length: functions over {LIMIT} lines (split them into named "
              "steps):")
        for length, rel, start, name in new:
            print(f"  {rel}:{start}  {name}  {length} lines")
    if split:
        print("check_function_length: KNOWN_LONG names functions within the limit (remove "
              "them from the list):")
        for s in split:
            print("  " + s)
    if new or split:
        return 1
    print(f"check_function_length: no function over {LIMIT} lines outside tests, "
          f"{len(KNOWN_LONG)} known ones waiting to be split")
    return 0


if __name__ == "__main__":
    sys.exit(main())

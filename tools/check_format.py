#!/usr/bin/env python3
"""Fails on C++ that clang-format (.clang-format: Google, column 100) would change, and on
BUILD files whose `deps` lists are not sorted (local ":x" first, then "//pkg", then "@repo",
each group alphabetical, as buildifier orders them).

  tools/check_format.py          check (exit 1 and list the offenders)
  tools/check_format.py --fix    rewrite the files in place
"""
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SKIP = set()  # folders (relative to ROOT) left alone


def tracked(suffixes):
    """The files under ROOT whose names end with one of `suffixes`, outside bazel-* output
    links, .git and SKIP."""
    out = []
    for d, dirs, files in os.walk(ROOT):
        rel = pathlib.Path(d).relative_to(ROOT).as_posix()
        dirs[:] = [x for x in dirs if not x.startswith(("bazel-", ".git"))
                   and (f"{rel}/{x}".lstrip("./") not in SKIP)]
        out += [pathlib.Path(d) / f for f in files if f.endswith(suffixes)]
    return sorted(out)


def dep_key(label):
    name = label.strip('"')
    group = 0 if name.startswith(":") else 1 if name.startswith("//") else 2
    return (group, name)


DEPS = re.compile(r'(\n(\s*)deps = \[\n)((?:\s*"[^"]*",\n)+)(\s*\])')


def sort_deps(text):
    def fix(m):
        lines = m.group(3).splitlines(keepends=True)
        lines.sort(key=lambda l: dep_key(l.strip().rstrip(",")))
        return m.group(1) + "".join(lines) + m.group(4)
    return DEPS.sub(fix, text)


def main():
    fix = "--fix" in sys.argv[1:]
    bad = []
    cc = tracked((".cc", ".h"))
    if cc:
        cmd = ["clang-format", "-i"] if fix else ["clang-format", "--dry-run", "--Werror"]
        r = subprocess.run(cmd + [str(p) for p in cc], capture_output=True, text=True)
        if r.returncode != 0:
            bad += sorted({l.split(":")[0] for l in r.stderr.splitlines() if ": error:" in l})
    for build in tracked(("BUILD.bazel", ".BUILD")):
        text = build.read_text()
        fixed = sort_deps(text)
        if fixed != text:
            if fix:
                build.write_text(fixed)
            else:
                bad.append(f"{build} (deps not sorted)")
    if bad:
        print("check_format: not formatted (run tools/check_format.py --fix):")
        for b in bad:
            print("  " + str(b))
        return 1
    print(f"check_format: {len(cc)} C++ files and the BUILD files are formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main())

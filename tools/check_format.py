#!/usr/bin/env python3
"""Fails on C++ that clang-format (.clang-format: Google, column 100) would change, and on
BUILD files whose `deps` lists are not sorted (local ":x" first, then "//pkg", then "@repo",
each group alphabetical, as buildifier orders them), and on headers that their folder's
README.md (the nearest one above them) does not name, by their path from that folder, and
(tools/check_function_length.py) on functions over 120 lines outside tests.

  tools/check_format.py          check (exit 1 and list the offenders)
  tools/check_format.py --fix    rewrite the files in place
"""
import os
import pathlib
import re
import subprocess
import sys

import check_function_length

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


def unlisted_headers(headers):
    """Headers whose nearest README.md above them does not name them by their path from the
    README's folder ("cuda/gpu_api.h" in runtime/README.md)."""
    out = []
    texts = {}
    for h in headers:
        d = h.parent
        while d != ROOT and not (d / "README.md").exists():
            d = d.parent
        readme = d / "README.md"
        if readme not in texts:
            texts[readme] = readme.read_text() if readme.exists() else ""
        rel = h.relative_to(d).as_posix()
        if rel not in texts[readme]:
            out.append(f"{h.relative_to(ROOT).as_posix()} (not in {readme.relative_to(ROOT)})")
    return out


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
    unlisted = unlisted_headers([p for p in cc if p.suffix == ".h"])
    if unlisted:
        print("check_format: headers their folder's README.md does not name:")
        for h in unlisted:
            print("  " + h)
    if bad:
        print("check_format: not formatted (run tools/check_format.py --fix):")
        for b in bad:
            print("  " + str(b))
        return 1
    if unlisted:
        return 1
    if check_function_length.main() != 0:
        return 1
    print(f"check_format: {len(cc)} C++ files and the BUILD files are formatted; every header "
          "is named in its folder's README")
    return 0


if __name__ == "__main__":
    sys.exit(main())

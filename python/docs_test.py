"""Runs every ```python block of a Markdown file, top to bottom, in one namespace (what
docs/torch.md promises its readers). Exit 1, naming the block's first line, on an error."""

import re
import sys
import traceback


def main(path):
    text = open(path).read()
    blocks = [(text.count("\n", 0, m.start()) + 2, m.group(1))
              for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S)]
    if not blocks:
        print(f"docs_test: {path} has no python blocks")
        return 1
    namespace = {"__name__": "__docs__"}
    for line, code in blocks:
        print(f"docs_test: {path}:{line}: running", flush=True)
        try:
            exec(compile(code, f"{path}:{line}", "exec"), namespace)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            print(f"docs_test: {path}:{line}: the block failed")
            return 1
    print(f"docs_test: {len(blocks)} blocks of {path} ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""A generated block of a Markdown file, between two marker comments, replaced in place."""

import os


def replace_block(path, begin, end, block, heading=""):
    """Writes `block` (which starts with `begin` and ends with `end`) over the text between
    the markers of `path`; appends it (after `heading`, when given) where there are none."""
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + heading + block + "\n"
    with open(path, "w") as f:
        f.write(text)

"""The exporter's error and its one-line messages (no torch here: the command line's checks
and compare.py import it without loading torch)."""

import sys


class ExportError(Exception):
    """An export step failed: `step` names it; the message carries PyTorch's exception."""

    def __init__(self, step, message, fatal=False):
        super().__init__(f"{step}: {message}")
        self.step, self.message = step, message
        # The model itself asked to stop (sys.exit): no other path is tried (the exporter's
        # fallback from torch.fx to the AOT path is for models torch.fx cannot trace).
        self.fatal = fatal


def one_line(text):
    """A message on one line (torch's often span several; torch.fx's interpreter adds an
    empty "Original traceback: None")."""
    text = str(text).replace("\nOriginal traceback:\nNone", "")
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def note(text):
    """A one-line note on stderr, `overlap_export: <text>`."""
    print(f"overlap_export: {one_line(text)}", file=sys.stderr)

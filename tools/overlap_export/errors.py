"""The exporter's error (no torch here: the command line's checks and compare.py import it
without loading torch)."""


class ExportError(Exception):
    """An export step failed: `step` names it; the message carries PyTorch's exception."""

    def __init__(self, step, message, fatal=False):
        super().__init__(f"{step}: {message}")
        self.step = step
        # The model itself asked to stop (sys.exit): no other path is tried (the exporter's
        # fallback from torch.fx to the AOT path is for models torch.fx cannot trace).
        self.fatal = fatal

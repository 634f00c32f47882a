"""Models the interop tests export (plain torch.nn: no dependency beyond torch)."""

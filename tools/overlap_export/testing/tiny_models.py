"""Tiny models for the exporter's CLI tests (cli_test.py): a two-layer perceptron that exports
in a second, and models that misbehave in their constructor or forward (sys.exit, an
exception, KeyboardInterrupt), as user code can."""

import sys

import torch
import torch.fx


class Tiny(torch.nn.Module):
    """Linear(4, 3), ReLU, Linear(3, 2): inputs 2x4 (or any Nx4)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 3)
        self.fc2 = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def tiny():
    return Tiny()


class ExitInConstructor(Tiny):
    def __init__(self):
        super().__init__()
        sys.exit(3)


class ExitInForward(Tiny):
    def forward(self, x):
        sys.exit(4)


class ExitInAotForward(Tiny):
    """torch.fx cannot trace it (control flow on a tensor), so with --aot the exporter takes
    the AOT path, where the forward, run on real tensors, calls sys.exit(5)."""

    def forward(self, x):
        if x.sum() > -1e30:
            sys.exit(5)
        return super().forward(x)


def _refuse(x):
    raise ValueError("the tiny model refuses its input")


# A leaf for torch.fx (traced as a call, not into): the ValueError comes in the forward's
# run on the example inputs, after tracing has succeeded.
torch.fx.wrap("_refuse")


class RaiseInForward(Tiny):
    def forward(self, x):
        return _refuse(super().forward(x))


class InterruptInConstructor(Tiny):
    def __init__(self):
        super().__init__()
        raise KeyboardInterrupt

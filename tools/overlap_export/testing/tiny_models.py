"""Tiny models for the exporter's CLI tests (cli_test.py) and export_test.sh: a two-layer
perceptron that exports in a second; models that misbehave in their constructor or forward
(sys.exit, an exception, KeyboardInterrupt), as user code can; models whose state the export
must carry (a cached weight, tensor constants, RNN weights, batch norm's statistics, weight
norm's computed weight, label smoothing's backward constants, a float32 computation inside);
and models it refuses (a tensor's value read in Python: data-dependent control flow,
`.item()`; an output that is not a tensor)."""

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
    """torch.fx cannot trace it (control flow on a size, a Proxy there), so with --aot the
    exporter takes the AOT path, where sizes are the example's and the forward calls
    sys.exit(5)."""

    def forward(self, x):
        if x.shape[0] > 0:
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


class CachedWeight(torch.nn.Module):
    """Reads its parameter through a list it cached at construction, as nn.RNNBase reads
    `_flat_weights`: a functional call swaps `w` but not the list, so the AOT graph reads
    the parameter as a constant (get_attr) and the backward gives it no gradient. The
    exporter refuses it. Inputs 2x4."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))
        self._cache = [self.w]

    def forward(self, x):
        return x @ self._cache[0]


def cached_weight():
    return CachedWeight()


class WithConstant(Tiny):
    """Scales its input by a tensor made in the forward (torch.tensor): AOTAutograd keeps it
    as a tensor constant (get_attr), which the exporter binds as constant/<name>."""

    def forward(self, x):
        scale = torch.tensor([1.0, 2.0, 3.0, 4.0])
        return super().forward(x * scale)


def with_constant():
    return WithConstant()


class Recurrent(torch.nn.Module):
    """nn.LSTM (2 layers, both directions, batch_first) then nn.GRU then a linear head:
    integer inputs 2x5 below 11."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 4)
        self.lstm = torch.nn.LSTM(4, 3, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(6, 3)
        self.head = torch.nn.Linear(3, 2)

    def forward(self, x):
        y, _ = self.lstm(self.emb(x))
        z, _ = self.gru(y.transpose(0, 1))
        return self.head(z)


def recurrent():
    return Recurrent()


class BatchNormNet(torch.nn.Module):
    """Two convolutions, each with nn.BatchNorm2d and ReLU, then a pooled linear head:
    inputs Nx3x8x8. In training mode its running statistics (and num_batches_tracked) are
    updated every forward: docs/interop.md's buffers."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(6)
        self.conv2 = torch.nn.Conv2d(6, 8, 3, stride=2, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(8, momentum=0.3)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))


def batch_norm_net():
    return BatchNormNet()


class SharedBatchNorm(torch.nn.Module):
    """One nn.BatchNorm2d applied twice in a forward: its running statistics are updated
    twice per step (and num_batches_tracked counts 2). Inputs Nx4x5x5."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.relu(self.bn(self.conv(x)))
        return self.head(x.mean((2, 3)))


def shared_batch_norm():
    return SharedBatchNorm()


class WeightNormed(torch.nn.Module):
    """nn.utils.weight_norm on a linear layer by its output rows (dim 0: ATen's fused pair)
    and on another by its whole weight (dim None): each `weight` is computed from weight_g
    and weight_v by a forward pre-hook, a tensor with autograd's graph attached (deepcopy
    refuses those). Inputs Nx4."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.utils.weight_norm(torch.nn.Linear(4, 3))
        self.fc2 = torch.nn.utils.weight_norm(torch.nn.Linear(3, 2), dim=None)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def weight_normed():
    return WeightNormed()


class LabelSmoothing(torch.nn.Module):
    """Returns F.cross_entropy with label_smoothing 0.1 against fixed targets: class indices
    (`soft` False) or class probabilities (`soft` True). Its AOT backward reads tensor
    constants of its own (the smoothing's weights). Inputs 2x4."""

    def __init__(self, soft=False):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.soft = soft

    def forward(self, x):
        if self.soft:
            target = torch.softmax(torch.arange(6.0).reshape(2, 3), -1)
        else:
            target = torch.tensor([0, 2])
        return torch.nn.functional.cross_entropy(self.fc(x), target, label_smoothing=0.1)


def label_smoothing(soft=False):
    return LabelSmoothing(soft)


class Router(torch.nn.Module):
    """Picks one of two layers by the sign of its input's sum: control flow on a tensor's
    value, which neither torch.fx nor the AOT trace can follow."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.a(x)
        return self.b(x)


class Routed(torch.nn.Module):
    """A Router as blocks.1 of a Sequential. Inputs Nx4."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(torch.nn.Linear(4, 4), Router(), torch.nn.Linear(4, 2))

    def forward(self, x):
        return self.blocks(x)


def routed():
    return Routed()


class ItemScale(Tiny):
    """Divides its output by its largest magnitude, read with `.item()`: a Python number from
    a tensor, which the AOT trace cannot hold. Inputs Nx4."""

    def forward(self, x):
        y = super().forward(x)
        scale = y.abs().max().item()
        return y / scale


def item_scale():
    return ItemScale()


class Float32Inside(Tiny):
    """Casts its input to float32 (`x.float()`) before its layers, as mixed-precision code
    does: in the model's float64 copy (its parameters float64) the first layer would meet a
    float32 input, but for the exporter's float64 substitution. Inputs Nx4."""

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.float())))


def float32_inside():
    return Float32Inside()


class Float32Only(Tiny):
    """Refuses any input dtype but float32, as code written for one precision does: its
    float64 copy fails. Inputs Nx4."""

    def forward(self, x):
        if x.dtype != torch.float32:
            raise TypeError(f"Float32Only takes float32 inputs, not {x.dtype}")
        return super().forward(x)


def float32_only():
    return Float32Only()


class DictOutput(Tiny):
    """Returns {"logits": ...}, not a tensor. Inputs Nx4."""

    def forward(self, x):
        return {"logits": super().forward(x)}


def dict_output():
    return DictOutput()


class ConvsAndMasks(torch.nn.Module):
    """Conv1d(3, 4, 3) on Nx3xL and Conv3d(2, 3, 3, padding=1) on Nx2xDxHxW: the first's
    positive outputs kept by a bool mask (multiplied in) and averaged over their count (a
    bool sum: int64), plus the second's mean. Convolutions of 1 and 3 spatial dimensions and
    mixed dtypes, as `overlap inspect --shapes` must type them (the CPU kernels run 2-d
    convolutions only)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(3, 4, 3)
        self.conv3 = torch.nn.Conv3d(2, 3, 3, padding=1)

    def forward(self, x, v):
        y = self.conv1(x)
        mask = y > 0
        return (y * mask).sum() / (mask.sum() + 1) + self.conv3(v).mean()


def convs_and_masks():
    return ConvsAndMasks()


class MaskedMean(torch.nn.Module):
    """Linear(4, 3); its positive outputs kept by a bool mask (float32 * bool) and averaged
    over their count per row (a bool sum: int64, plus 1), scaled by integer arithmetic on
    int64 ids (a subtraction, then a true division: float32). Inputs Nx4 and N int64."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x, ids):
        y = self.fc(x)
        mask = y > 0
        kept = (y * mask).sum(dim=1) / (mask.sum(dim=1) + 1)
        return kept * ((ids - 1) / 2)


def masked_mean():
    return MaskedMean()


class PlainTable(Tiny):
    """Adds a fixed table it keeps as a plain attribute, neither a parameter nor a buffer
    (as VideoMAE keeps its sinusoidal positions): the exporter reads it as a buffer. Inputs
    Nx4."""

    def __init__(self):
        super().__init__()
        self.table = torch.linspace(-1, 1, 4)

    def forward(self, x):
        return super().forward(x + self.table)


def plain_table():
    return PlainTable()


class SharedModule(torch.nn.Module):
    """One Linear reachable by two paths (`shared` and `blocks.0.proj`, as CoaT shares its
    position encodings between blocks), applied twice. Inputs Nx4."""

    def __init__(self):
        super().__init__()
        self.shared = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Module()])
        self.blocks[0].proj = self.shared
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.relu(self.blocks[0].proj(torch.relu(self.shared(x)))))


def shared_module():
    return SharedModule()


class CachedBias(Tiny):
    """Caches a tensor computed from a parameter in a dict on its first call in evaluation
    mode and reads the cache thereafter (timm's LeViT and EfficientFormer attention biases).
    Inputs Nx4."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(2, 2))
        self.cache = {}

    def forward(self, x):
        if self.training:
            b = self.bias.sum(0)
        else:
            if "b" not in self.cache:
                self.cache["b"] = self.bias.sum(0)
            b = self.cache["b"]
        return super().forward(x) + b


def cached_bias():
    return CachedBias()

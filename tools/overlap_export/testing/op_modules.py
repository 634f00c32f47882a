"""One small model per operator class users' models reach (docs/ops.md), for the model zoo's
operator rows (tools/zoo.py, docs/gallery.md): each ends in a tensor whose last dimension the
zoo's cross-entropy reads, so the AOT pair holds the class's forward op and torch's backward
formula for it, and `overlap exec` is compared with torch on both.

Inputs (the zoo's table states them): signals 2x3x16, volumes 2x3x4x8x8, images 2x3x16x16,
token ids 2x6 below 11."""

import torch
import torch.nn.functional as F


class Conv1d(torch.nn.Module):
    """Audio-style: nn.Conv1d (strided, padded), max and average pooling over time, adaptive
    average pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 4, 3, stride=1, padding=1)
        self.conv2 = torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2)
        self.head = torch.nn.Linear(6, 5)

    def forward(self, x):
        y = F.max_pool1d(torch.relu(self.conv(x)), 2)
        y = F.avg_pool1d(self.conv2(y), 2)
        return self.head(F.adaptive_avg_pool1d(y, 1).flatten(1))


class Conv3d(torch.nn.Module):
    """Video-style: nn.Conv3d, 3-D max pooling (with indices in the backward), 3-D average
    pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4 * 1 * 2 * 2, 5)

    def forward(self, x):
        y = F.max_pool3d(torch.relu(self.conv(x)), 2)
        y = F.avg_pool3d(y, (2, 2, 2))
        return self.head(y.flatten(1))


class AdaptiveMax(torch.nn.Module):
    """nn.AdaptiveMaxPool2d to 3x3 (uneven windows) after a convolution."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4 * 9, 5)

    def forward(self, x):
        return self.head(F.adaptive_max_pool2d(self.conv(x), 3).flatten(1))


class AdaptiveVolume(torch.nn.Module):
    """Adaptive pooling of other dimensionalities after nn.Conv3d: nn.AdaptiveMaxPool3d to
    3x3x5 (uneven windows, one larger than its input), nn.AdaptiveAvgPool3d to 1x3x3, and
    nn.AdaptiveMaxPool1d over the flattened volume."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4 * (45 + 9 + 7), 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        parts = [F.adaptive_max_pool3d(y, (3, 3, 5)), F.adaptive_avg_pool3d(y, (1, 3, 3)),
                 F.adaptive_max_pool1d(y.flatten(2), 7)]
        return self.head(torch.cat([p.flatten(1) for p in parts], 1))


class Scatter(torch.nn.Module):
    """gather, scatter, scatter_add, index_add and select_scatter on an embedding's output,
    at fixed indices (buffers)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.register_buffer("idx", torch.tensor([[2, 0, 1, 5], [7, 3, 3, 1]]))
        self.register_buffer("rows", torch.tensor([0, 2, 2, 5]))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        e = self.emb(x)  # [2, 6, 8]
        idx = self.idx.unsqueeze(1).expand(2, 6, 4)
        g = torch.gather(e, 2, idx)  # [2, 6, 4]
        s = torch.zeros_like(e).scatter_add(2, idx, g * 2.0)
        t = e.scatter(2, idx, g)
        u = e.index_add(1, self.rows, e[:, :4] * 0.5)
        v = torch.select_scatter(u, e[:, 1] * 3.0, 1, 4)
        return self.head(s + t + v)


class Cumsum(torch.nn.Module):
    """cumsum over the sequence (a running mean's numerator)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(torch.cumsum(self.emb(x), dim=1) / 6.0)


class EmbeddingBag(torch.nn.Module):
    """A recommender's nn.EmbeddingBag (`mode`: sum, mean or max) over offsets-delimited
    bags of the flattened ids, then a linear head."""

    def __init__(self, mode="sum"):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(11, 8, mode=mode)
        self.register_buffer("offsets", torch.tensor([0, 2, 5, 9]))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.bag(x.flatten(), self.offsets))


class RepeatInterleave(torch.nn.Module):
    """Grouped-query attention's key / value head expansion: repeat_interleave over heads."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        e = self.emb(x).view(2, 6, 2, 4)
        return self.head(e.repeat_interleave(2, dim=2).flatten(2))


class Unary(torch.nn.Module):
    """sin, cos, abs and log (rotary embeddings' tables, a log-magnitude)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        e = self.emb(x)
        return self.head(torch.sin(e) * torch.cos(e) + torch.log(torch.abs(e) + 1.0))


class Activations(torch.nn.Module):
    """nn.PReLU (one slope per channel), leaky_relu, pixel_shuffle / pixel_unshuffle."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.prelu = torch.nn.PReLU(8)
        self.conv2 = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        y = F.pixel_shuffle(self.prelu(self.conv(x)), 2)  # [2, 2, 32, 32]
        y = F.leaky_relu(self.conv2(y), 0.1)
        y = F.pixel_unshuffle(y, 4)  # [2, 64, 8, 8]
        return self.head(y.mean((2, 3)).view(2, 4, 16))


class MaxReduce(torch.nn.Module):
    """max over a dimension (values and indices) and amax."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        e = self.emb(x)
        values, _ = e.max(dim=1, keepdim=True)
        return self.head(e - values + torch.amax(e, dim=(0, 1)))


class Factories(torch.nn.Module):
    """ones, empty (then filled), arange with a start and step, triu_indices, a dtype cast
    (_to_copy): relative position biases and masks built inside the model."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.bias = torch.nn.Parameter(torch.randn(6))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        e = self.emb(x)
        pos = torch.arange(1, 13, 2, dtype=torch.float32) / 12.0  # [6]
        rows, cols = torch.triu_indices(6, 6, 1)
        rel = torch.ones(6, 6) * 0.5
        rel = rel.index_put((rows, cols), self.bias[cols - rows])
        buf = torch.empty(2, 6, 8).fill_(0.25)
        w = (x > 4).to(torch.float32).unsqueeze(-1)
        return self.head(e * w + rel.sum(1).unsqueeze(-1) * pos.unsqueeze(-1) + buf)


class Dropout(torch.nn.Module):
    """nn.Dropout in training mode (p = 0.25) between two layers."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.drop = torch.nn.Dropout(0.25)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.drop(torch.relu(self.emb(x))))

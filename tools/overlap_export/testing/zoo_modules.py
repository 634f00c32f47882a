"""Small models built from torch.nn's common layers, for the model zoo (tools/zoo.py,
docs/gallery.md): each a classifier or tagger with a cross-entropy loss over its last
dimension, at a size that runs in seconds on two cores.

Inputs (the zoo's table states them): images 2x3x16x16, token ids 2x6 below 11. The
recurrent and transformer models take their sizes as keyword arguments (tools/bench.py runs
larger ones); the defaults are the zoo's."""

import torch
import torch.nn.functional as F


class Recurrent(torch.nn.Module):
    """An embedding, then nn.LSTM / nn.GRU / nn.RNN (`kind`), `layers` deep, one or both
    directions, batch-first or not, then a linear head over every position."""

    def __init__(self, kind="LSTM", layers=2, bidirectional=True, batch_first=True, vocab=11,
                 dim=8, hidden=6, classes=5):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.rnn = getattr(torch.nn, kind)(dim, hidden, num_layers=layers,
                                           bidirectional=bidirectional, batch_first=batch_first)
        self.batch_first = batch_first
        self.head = torch.nn.Linear(2 * hidden if bidirectional else hidden, classes)

    def forward(self, x):
        e = self.emb(x)
        if not self.batch_first:
            e = e.transpose(0, 1)
        y, _ = self.rnn(e)
        if not self.batch_first:
            y = y.transpose(0, 1)
        return self.head(y)


def recurrent(**kwargs):
    return Recurrent(**kwargs)


class Attention(torch.nn.Module):
    """nn.MultiheadAttention (self-attention, batch-first, with a causal mask or none), then
    a linear head."""

    def __init__(self, causal=False):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 16)
        self.attn = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        self.head = torch.nn.Linear(16, 5)
        self.causal = causal

    def forward(self, x):
        e = self.emb(x)
        mask = None
        if self.causal:
            n = x.shape[1]
            mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        y, _ = self.attn(e, e, e, attn_mask=mask, need_weights=False)
        return self.head(y)


def attention(**kwargs):
    return Attention(**kwargs)


class Transformer(torch.nn.Module):
    """nn.TransformerEncoderLayer, or a nn.TransformerDecoderLayer over an encoder layer's
    memory (`decoder`), batch-first, then a linear head."""

    def __init__(self, decoder=False, norm_first=False, activation="relu", vocab=11, dim=16,
                 heads=4, ff=32, classes=5):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.enc = torch.nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, batch_first=True,
                                                    norm_first=norm_first, activation=activation)
        self.dec = torch.nn.TransformerDecoderLayer(dim, heads, ff, dropout=0.0,
                                                    batch_first=True, norm_first=norm_first,
                                                    activation=activation) if decoder else None
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, x):
        e = self.emb(x)
        y = self.enc(e)
        if self.dec is not None:
            y = self.dec(e, y)
        return self.head(y)


def transformer(**kwargs):
    return Transformer(**kwargs)


class ConvLayers(torch.nn.Module):
    """A convolution, nn.GroupNorm, nn.Dropout (evaluation mode: the identity), a
    nn.ConvTranspose2d (stride 2) back up, nn.Upsample (`mode`) and a pooled linear head."""

    def __init__(self, mode="nearest"):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.norm = torch.nn.GroupNorm(2, 8)
        self.drop = torch.nn.Dropout(0.5)
        self.up = torch.nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1)
        self.resize = torch.nn.Upsample(scale_factor=2, mode=mode,
                                        align_corners=False if mode == "bilinear" else None)
        self.head = torch.nn.Linear(6, 5)

    def forward(self, x):
        y = self.drop(F.relu(self.norm(self.conv(x))))
        y = self.resize(self.up(y))
        return self.head(y.mean((2, 3)))


def conv_layers(**kwargs):
    return ConvLayers(**kwargs)


class Interpolate(torch.nn.Module):
    """F.interpolate to a given size (`mode`: nearest or bilinear, align_corners both ways)
    between two convolutions."""

    def __init__(self, mode="bilinear", align_corners=False):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 5)
        self.mode = mode
        self.align_corners = align_corners if mode == "bilinear" else None

    def forward(self, x):
        y = F.interpolate(self.a(x), size=(11, 13), mode=self.mode,
                          align_corners=self.align_corners)
        return self.head(self.b(y).mean((2, 3)))


def interpolate(**kwargs):
    return Interpolate(**kwargs)

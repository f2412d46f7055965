"""The foCus simulator: image encoder -> 1-layer LSTM -> logits (paper App. C.1).

The encoder's embedding is the LSTM's initial hidden state h_0 (c_0 = 0). The input at
entry i is the previous entry y_{i-1}, or a start token at i = 1. Training is teacher
forced: one ``nn.LSTM`` call over the whole sequence. Sampling feeds each drawn entry back.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from ..names import ENCODERS
from ..scoring.montecarlo import RaoBlackwell


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block, the same modules under the same names (its state
    dict is torchvision's): conv3x3-BN-ReLU-conv3x3-BN plus the shortcut, then ReLU."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


class ResNet18(nn.Module):
    """torchvision's ``resnet18(weights=None)``, written out here so that building a model
    does not import torchvision (its import pulls in torch._dynamo: ~4 CPU-seconds in every
    process that builds a model, every trial's worker among them). Same modules, names,
    construction order and initialisation, so under one seed its weights equal torchvision's
    bit for bit (tests/test_core_model.py compares them)."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, 2)
        self.layer2 = self._make_layer(128, 2, stride=2)
        self.layer3 = self._make_layer(256, 2, stride=2)
        self.layer4 = self._make_layer(512, 2, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, kernel_size=1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _resnet18(in_channels: int, embed_dim: int, width: int = 64) -> nn.Module:
    """ResNet-18 (He et al. 2016; :class:`ResNet18`, torchvision's layout) with ``width`` channels in its first stage.

    width = 64 is the standard network (11.2M parameters, the paper's encoder); the stages
    have width, 2, 4 and 8 x width channels, so width = 32 has a quarter of the
    parameters and multiply-adds with the same depth and receptive fields. Random init:
    nothing is downloaded. Small inputs (32x32) work: the network ends in adaptive average
    pooling.
    """
    if width == 64:
        net = ResNet18(num_classes=embed_dim)
        if in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return net
    net = ResNet18(num_classes=embed_dim)
    # Same stem and stages, narrower: rebuilt at `width` (after the standard network, so the
    # random draws, and the weights of a seed, are those of the earlier torchvision-built one).
    net.conv1 = nn.Conv2d(in_channels, width, kernel_size=7, stride=2, padding=3, bias=False)
    net.bn1 = nn.BatchNorm2d(width)
    net.inplanes = width
    net.layer1 = net._make_layer(width, 2)
    net.layer2 = net._make_layer(2 * width, 2, stride=2)
    net.layer3 = net._make_layer(4 * width, 2, stride=2)
    net.layer4 = net._make_layer(8 * width, 2, stride=2)
    net.fc = nn.Linear(8 * width, embed_dim)
    for m in net.modules():  # the initialisation of ResNet18, for the rebuilt layers
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return net


def _small_cnn(in_channels: int, embed_dim: int) -> nn.Module:
    """A three-layer CNN for tests and CPU smoke runs; same interface as ResNet-18."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, embed_dim),
    )


class Simulator(nn.Module):
    """p(y_i | x, y_<i) for sequences of ``num_classes`` classes.

    Args:
        num_classes: c, the number of classes of each entry.
        encoder: "resnet18" (the paper's) or "small" (a 3-layer CNN for tests/CPU).
        embed_dim: size of the image embedding; projected to ``hidden`` if they differ.
        hidden: LSTM hidden size (paper: 256).
        in_channels: image channels.
        encoder_width: channels of ResNet-18's first stage (64 = the standard network).
    """

    def __init__(
        self,
        num_classes: int,
        encoder: str = "resnet18",
        embed_dim: int = 256,
        hidden: int = 256,
        in_channels: int = 3,
        encoder_width: int = 64,
    ):
        super().__init__()
        if encoder not in ENCODERS:
            raise ValueError(f"unknown encoder {encoder!r}; choose one of {ENCODERS}")
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.num_classes = num_classes
        self.hidden = hidden
        if encoder == "resnet18":
            self.encoder = _resnet18(in_channels, embed_dim, encoder_width)
        else:
            self.encoder = _small_cnn(in_channels, embed_dim)
        self.to_h0 = nn.Identity() if embed_dim == hidden else nn.Linear(embed_dim, hidden)
        # Token num_classes is the start token.
        self.token = nn.Embedding(num_classes + 1, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=1, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    @property
    def start_token(self) -> int:
        return self.num_classes

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images [B, C, H, W] -> h_0 [B, hidden]. Normalisation happens here."""
        if images.dtype != torch.uint8:
            raise TypeError(f"images must be uint8 [B, C, H, W], got {images.dtype}")
        x = images.to(self.head.weight.dtype).div_(127.5).sub_(1.0)  # [0, 255] -> [-1, 1]
        if x.is_cuda:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.to_h0(self.encoder(x))

    def forward(self, images: torch.Tensor, sequences: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits.

        images: uint8 [B, C, H, W]; sequences: long [B, L] (ground truth entries).
        Returns logits z [B, L, c] where z[:, i] is computed from y_<i.
        """
        B, L = sequences.shape
        start = torch.full((B, 1), self.start_token, dtype=torch.long, device=sequences.device)
        inputs = torch.cat([start, sequences[:, :-1]], dim=1)  # (B, L): y_0=start, y_1..y_{L-1}
        h0 = self.encode(images).unsqueeze(0)  # (1, B, H)
        out, _ = self.lstm(self.token(inputs), (h0, torch.zeros_like(h0)))  # (B, L, H)
        return self.head(out)

    @torch.no_grad()
    def sample(
        self,
        images: torch.Tensor,
        num_samples: int,
        length: int,
        generator: torch.Generator | None = None,
        prefix: Sequence[int] | None = None,
        forced_event: int | None = None,
        temperature: torch.Tensor | None = None,
        rao_blackwell: int | None = None,
    ):
        """Autoregressive draws: images [B, C, H, W] -> samples long [B, M, L].

        prefix: classes forced as the first entries (exact conditioning on a prefix: the
            later entries are drawn from p(y_i | x, prefix, ...)).
        forced_event: a class that, once drawn, is forced to repeat to the end (END, dead).
            Such rows need no more LSTM work, so they are dropped from the batch; the result
            is identical to running every row to the end with the class forced. This is
            exact only for a model whose own p(event -> event) is 1; for any other
            it hides the rows that would leave the class. None (the default): every row is
            drawn to the end from the model's own conditionals.
        temperature: optional [L] positive temperatures, one per entry: entry i is drawn
            from softmax(z_i / temperature[i]) (post-hoc temperature scaling).

        rao_blackwell: the event class; then also return the Rao-Blackwellized estimates
            of the same draws: (samples, marginals [B, L, c], time_pmf [B, L]), float64.
            marginals = mean over the M rows of p(y_i | x, sampled y_<i) (the model's own
            conditional at each sampled prefix, a forced entry one-hot), unbiased for
            P(Y_i | x) like the counted frequencies and never noisier (Rao-Blackwell);
            time_pmf[t] = mean over rows of 1[no event before t] p(y_t = event | x, y_<t)
            for t < L, turned into a distribution with the fraction of rows ended before t
            (``montecarlo.pmf_from_event_terms``: P(T <= t) estimated by that fraction plus
            the term), and T = L takes the rest (censored at L). They cost a sum per step
            (:class:`focus_tune.scoring.montecarlo.RaoBlackwell`, the baselines' accumulator too).

        Reproducibility: each entry is drawn by inverse-CDF from one uniform per (row, entry)
        taken from ``generator`` up front, so the same seed gives the same samples whether or
        not rows are dropped by the absorbing shortcut.
        """
        was_training = self.training
        self.eval()
        try:
            return self._sample(images, num_samples, length, generator, prefix, forced_event, temperature,
                                rao_blackwell)
        finally:
            self.train(was_training)

    def _sample(self, images, num_samples, length, generator, prefix, forced_event, temperature, rao_blackwell=None):
        device = images.device
        B, M, L, c = images.shape[0], num_samples, length, self.num_classes
        prefix = list(prefix or [])
        if len(prefix) > L:
            raise ValueError(f"prefix of {len(prefix)} entries is longer than length {L}")
        if any(not 0 <= p < c for p in prefix):
            raise ValueError(f"prefix classes must be in [0, {c}), got {prefix}")
        if forced_event is not None and not 0 <= forced_event < c:
            raise ValueError(f"forced_event (the absorbing class to force) must be in [0, {c}), got {forced_event}")
        if temperature is not None:
            temperature = torch.as_tensor(temperature, dtype=torch.float64, device=device)
            if temperature.shape != (L,) or not bool((temperature > 0).all()):
                raise ValueError(f"temperature must be [L] = [{L}] positive values, "
                                 f"got shape {tuple(temperature.shape)}")
        # One uniform per (row, entry), drawn on the CPU so a seed means the same on any device.
        u = torch.rand(B * M, L, generator=generator, dtype=torch.float64).to(device)

        # The input-to-gate product depends only on the previous class: precompute it for
        # the c + 1 tokens, so each step costs one [R, H] x [H, 4H] matmul instead of two.
        table, w_hh_t = sampler_weights(self.token.weight, self.lstm.weight_ih_l0, self.lstm.weight_hh_l0,
                                        self.lstm.bias_ih_l0, self.lstm.bias_hh_l0)
        h = self.encode(images).repeat_interleave(M, dim=0)  # (B*M, H)
        cell = torch.zeros_like(h)
        out = torch.empty(B * M, L, dtype=torch.long, device=device)
        rows = torch.arange(B * M, device=device)  # rows still being simulated
        prev = torch.full((B * M,), self.start_token, dtype=torch.long, device=device)
        rb = None if rao_blackwell is None else RaoBlackwell(B, M, L, c, rao_blackwell, device)
        for i in range(L):
            h, cell = sampler_cell(torch.index_select(table, 0, prev).addmm_(h, w_hh_t), cell)
            if i < len(prefix):
                draw = torch.full_like(prev, prefix[i])
                p = None
            else:
                z = self.head(h).double()  # (R, c)
                if temperature is not None:
                    z = z / temperature[i]
                p = torch.softmax(z, dim=-1)
                draw = torch.searchsorted(p.cumsum(dim=-1), u[rows, i].unsqueeze(1)).squeeze(1).clamp_(max=c - 1)
            if rb is not None:
                rb.add(i, rows, draw if p is None else p, draw)
            out[rows, i] = draw
            prev = draw
            if forced_event is not None and i + 1 < L:
                alive = draw != forced_event
                if not bool(alive.all()):
                    out[rows[~alive], i + 1 :] = forced_event
                    rows, prev, h, cell = rows[alive], prev[alive], h[alive], cell[alive]
                    if rows.numel() == 0:
                        break
        samples = out.view(B, M, L)
        return samples if rb is None else (samples, *rb.result(samples))


def sampler_weights(token: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor,
                    b_hh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler's LSTM weights (a leading member dimension allowed): the gate table
    token @ W_ih^T + both biases [..., c + 1, 4H] and W_hh^T [..., H, 4H], with the gates
    reordered i, f, o, g (PyTorch's order is i, f, g, o) and the g gate's rows doubled, for
    :func:`sampler_cell` (doubling is exact in floating point: the g pre-activation comes out
    exactly twice PyTorch's)."""
    H = w_hh.shape[-1]
    order = torch.cat([torch.arange(0, 2 * H), torch.arange(3 * H, 4 * H), torch.arange(2 * H, 3 * H)])
    order = order.to(w_hh.device)
    scale = torch.ones(4 * H, dtype=w_hh.dtype, device=w_hh.device)
    scale[3 * H :] = 2.0
    w_ih, w_hh = w_ih.index_select(-2, order), w_hh.index_select(-2, order)
    table = token @ w_ih.transpose(-1, -2) + b_ih.index_select(-1, order).unsqueeze(-2) \
        + b_hh.index_select(-1, order).unsqueeze(-2)
    return table * scale, w_hh.transpose(-1, -2) * scale


def sampler_cell(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step from its gates in the order i, f, o, 2g (:func:`sampler_weights`), which it
    overwrites. Every nonlinearity is a sigmoid: tanh(x) = 2 sigmoid(2x) - 1, so one in-place
    sigmoid over all four contiguous gate blocks, and one over 2c for tanh(c). PyTorch's CPU
    tanh costs about twice its sigmoid per element, and the strided quarter of an in-place
    tanh more (``benchmarks/bench_sampling.py --step``: the three cells side by side; the
    states agree with PyTorch's to float32 rounding, about 1e-6)."""
    H = cell.shape[-1]
    s = gates.sigmoid_()
    g = s[..., 3 * H :].mul_(2.0).sub_(1.0)  # tanh of the g pre-activation
    cell = torch.addcmul(s[..., H : 2 * H] * cell, s[..., :H], g)
    return s[..., 2 * H : 3 * H] * torch.sigmoid(cell * 2.0).mul_(2.0).sub_(1.0), cell

"""Models of GDPFed's experiments, all ``torch.func.vmap``-compatible (GroupNorm, no BatchNorm, no buffers)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class DigitsMLP(nn.Module):
    """Small MLP for sklearn's 8×8 digits (fast tests)."""

    def __init__(self, hidden: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x.flatten(-3))))

    def forward_batched(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """K clients' own weights at once (``params[name]``: (K, *shape)), x: (K, B, 1, 8, 8) → logits (K, B, 10):
        :meth:`forward` as batched products (plain autograd, so training never loads torch.func or torch.compile)."""
        h = F.relu(torch.baddbmm(params["fc1.bias"][:, None], x.flatten(-3), params["fc1.weight"].transpose(1, 2)))
        return torch.baddbmm(params["fc2.bias"][:, None], h, params["fc2.weight"].transpose(1, 2))


class CNN2(nn.Module):
    """2-layer CNN for Fashion-MNIST, the DP-SGD standard (Papernot et al. 2021; Opacus' MNIST example):
    conv8×8/2(16)-maxpool2/1-conv4×4/2(32)-maxpool2/1-fc(32)-fc(10), ReLU, d = 26,010.
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 8, stride=2, padding=3)
        self.conv2 = nn.Conv2d(16, 32, 4, stride=2)
        self.fc1 = nn.Linear(32 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # pooling before ReLU: the same values as ReLU before pooling (both monotone), on fewer elements
        x = F.relu(F.max_pool2d(self.conv1(x), 2, 1))
        x = F.relu(F.max_pool2d(self.conv2(x), 2, 1))
        return self.fc2(F.relu(self.fc1(x.flatten(-3))))

    def forward_batched(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """K clients' own weights at once (``params[name]``: (K, *shape)), x: (K, B, C, H, W) → logits (K, B, 10).

        The same arithmetic as :meth:`forward`: each convolution is one grouped convolution (group k = client k)
        over a (B, K·C, H, W) batch kept channels-last, the layout oneDNN's grouped kernels are fastest in (on
        2 CPU threads about 2x torch.func's vmap, which leaves the batch dims strided for pooling); the dense
        layers are batched products.
        """
        k, b, c, hgt, wid = x.shape
        h = x.permute(1, 3, 4, 0, 2).contiguous().view(b, hgt, wid, k * c).permute(0, 3, 1, 2)  # channels-last
        for name in ("conv1", "conv2"):
            conv, w = getattr(self, name), params[f"{name}.weight"]
            h = F.conv2d(h, w.flatten(0, 1), params[f"{name}.bias"].flatten(), conv.stride, conv.padding, groups=k)
            h = F.relu(F.max_pool2d(h, 2, 1))
        h = h.reshape(b, k, -1).transpose(0, 1)  # (K, B, C·H·W), the order of flatten(-3)
        h = F.relu(torch.baddbmm(params["fc1.bias"][:, None], h, params["fc1.weight"].transpose(1, 2)))
        return torch.baddbmm(params["fc2.bias"][:, None], h, params["fc2.weight"].transpose(1, 2))


class CNN2Paper(nn.Module):
    """The 2-layer CNN of McMahan et al. 2017 (FedAvg) for (Fashion-)MNIST, the paper-scale choice:
    conv5×5(32, same)-maxpool2-conv5×5(64, same)-maxpool2-fc(512)-fc(10), ReLU, d = 1,663,370.
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Channels-last from the first convolution on, the layout in which CPU max-pooling is vectorized (on
        10×32×28×28, 2 ms a call in NCHW against 0.06 ms): the first output is laid out so by a copy (with one input
        channel the layout is otherwise ambiguous; ``movedim`` and ``contiguous`` work under vmap), the second
        follows from its input. Pooling before the ReLU gives the same values (both monotone) on a quarter of the
        elements."""
        x = self.conv1(x).movedim(-3, -1).contiguous().movedim(-1, -3)
        x = F.relu(F.max_pool2d(x, 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        return self.fc2(F.relu(self.fc1(x.flatten(-3))))


class CNN3(nn.Module):
    """3-layer CNN for SVHN: three conv3×3-pool blocks (32, 64, 64) and a linear layer."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 64, 3, padding=1)
        self.fc = nn.Linear(64 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in (self.conv1, self.conv2, self.conv3):
            x = F.max_pool2d(F.relu(conv(x)), 2)
        return self.fc(x.flatten(-3))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.gn2 = nn.GroupNorm(groups, cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(groups, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return F.relu(out + (x if self.short is None else self.short(x)))


class ResNet18GN(nn.Module):
    """ResNet-18 (CIFAR variant, 3×3 stem) with GroupNorm instead of BatchNorm."""

    def __init__(self, num_classes: int = 10, groups: int = 32, width: int = 64) -> None:
        super().__init__()
        w = width
        self.conv1 = nn.Conv2d(3, w, 3, 1, 1, bias=False)
        self.gn1 = nn.GroupNorm(min(groups, w), w)
        layers, cin = [], w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if i == 0 else 2
            g = min(groups, cout)
            layers += [BasicBlock(cin, cout, stride, g), BasicBlock(cout, cout, 1, g)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.gn1(self.conv1(x))))
        return self.fc(x.mean(dim=(-2, -1)))


class CharLSTM(nn.Module):
    """LEAF's Shakespeare model: embedding(8) - 2-layer LSTM(256) - linear; an explicit LSTM so vmap works."""

    def __init__(self, vocab: int = 96, embed: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.hidden = hidden
        self.cells = nn.ModuleList(nn.Linear((embed if i == 0 else hidden) + hidden, 4 * hidden) for i in range(layers))
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h_seq = self.embed(x)  # (B, L, E)
        batch = h_seq.shape[:-2]
        for cell in self.cells:
            h = h_seq.new_zeros((*batch, self.hidden))
            c = h_seq.new_zeros((*batch, self.hidden))
            outs = []
            for t in range(h_seq.shape[-2]):
                gates = cell(torch.cat([h_seq[..., t, :], h], dim=-1))
                i, f, g, o = gates.chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outs.append(h)
            h_seq = torch.stack(outs, dim=-2)
        return self.fc(h_seq[..., -1, :])

    def forward_batched(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """K clients' own weights at once (``params[name]``: (K, *shape)), x: (K, B, L) → logits (K, B, vocab).

        The same arithmetic as :meth:`forward` with every product batched over clients: the input projections of
        all time steps as one batched matmul per layer, then per step ``torch.baddbmm`` with the (K, H, 4H)
        recurrent weights (torch.func's vmap cannot batch a fused RNN, and vmapping this time loop is slow).
        """
        k = x.shape[0]
        h_seq = params["embed.weight"][torch.arange(k, device=x.device)[:, None, None], x]  # (K, B, L, E)
        for i in range(len(self.cells)):
            w, b = params[f"cells.{i}.weight"], params[f"cells.{i}.bias"]  # (K, 4H, I + H), (K, 4H)
            n_in = h_seq.shape[-1]
            kb, steps = h_seq.shape[1], h_seq.shape[2]
            x_gates = torch.baddbmm(b[:, None, :], h_seq.reshape(k, kb * steps, n_in), w[..., :n_in].transpose(1, 2))
            x_gates = x_gates.view(k, kb, steps, -1)
            w_h = w[..., n_in:].transpose(1, 2)  # (K, H, 4H)
            h = h_seq.new_zeros((k, kb, self.hidden))
            c = h_seq.new_zeros((k, kb, self.hidden))
            outs = []
            for t in range(steps):
                gates = torch.baddbmm(x_gates[:, :, t], h, w_h)
                i_g, f_g, g_g, o_g = gates.chunk(4, dim=-1)
                c = torch.sigmoid(f_g) * c + torch.sigmoid(i_g) * torch.tanh(g_g)
                h = torch.sigmoid(o_g) * torch.tanh(c)
                outs.append(h)
            h_seq = torch.stack(outs, dim=2)
        return torch.baddbmm(params["fc.bias"][:, None, :], h_seq[:, :, -1], params["fc.weight"].transpose(1, 2))


MODELS: dict[str, tuple[type[nn.Module], tuple[str, ...]]] = {
    "mlp": (DigitsMLP, ("digits",)),
    "cnn": (CNN2, ("fmnist",)),
    "cnn2-paper": (CNN2Paper, ("fmnist",)),
    "cnn3": (CNN3, ("svhn",)),
    "resnet18-gn": (ResNet18GN, ("cifar10",)),
    "lstm": (CharLSTM, ("shakespeare",)),
}
"""``--model`` names: the class and the datasets whose inputs it takes."""

DEFAULT_MODEL = {"digits": "mlp", "fmnist": "cnn", "svhn": "cnn3", "cifar10": "resnet18-gn", "shakespeare": "lstm"}
"""The model each dataset trains without ``--model`` (fmnist: the small CPU-friendly CNN, d = 26,010)."""


def model_name(dataset: str, model: str | None = None) -> str:
    """The ``--model`` name ``model`` resolves to on ``dataset`` (its default if None); ValueError if it cannot."""
    if dataset not in DEFAULT_MODEL:
        raise ValueError(f"no model for dataset {dataset!r}")
    name = DEFAULT_MODEL[dataset] if model is None else model
    if name not in MODELS:
        raise ValueError(f"--model must be one of {', '.join(MODELS)}, got {name!r}")
    if dataset not in MODELS[name][1]:
        fits = [m for m, (_, ds) in MODELS.items() if dataset in ds]
        raise ValueError(f"--model {name} does not take {dataset} inputs; for {dataset} choose {' or '.join(fits)}")
    return name


def make_model(dataset: str, num_classes: int = 10, model: str | None = None) -> nn.Module:
    """The ``model`` (default: the dataset's, :data:`DEFAULT_MODEL`) for ``dataset`` with ``num_classes`` outputs."""
    cls = MODELS[model_name(dataset, model)][0]
    return cls(vocab=num_classes) if cls is CharLSTM else cls(num_classes=num_classes)


def model_dim(dataset: str, num_classes: int = 10, model: str | None = None) -> int:
    """d, the number of parameters of ``model`` on ``dataset`` (the PFA plan's ``model_dim``)."""
    return sum(p.numel() for p in make_model(dataset, num_classes, model).parameters())


HEADS: dict[type, str] = {DigitsMLP: "fc2", CNN2: "fc2", CNN2Paper: "fc2", CNN3: "fc", ResNet18GN: "fc", CharLSTM: "fc"}
"""The personal classifier head of each model (DP²-FedSAM, CENTAUR): its final linear layer."""


def head_module_name(model: nn.Module) -> str:
    """Name of ``model``'s head: :data:`HEADS`, else its last registered ``nn.Linear``."""
    name = HEADS.get(type(model))
    if name is None:
        linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        if not linears:
            raise ValueError(f"{type(model).__name__} has no linear layer to keep as a personal head")
        name = linears[-1]
    return name


def split_head(model: nn.Module) -> list[str]:
    """Parameter names of ``model``'s personal head (the final classifier layer); every other parameter is the
    shared body."""
    prefix = head_module_name(model) + "."
    return [n for n, _ in model.named_parameters() if n.startswith(prefix)]

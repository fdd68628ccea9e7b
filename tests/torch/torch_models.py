"""The models of the libtorch tests (issue 19), in Python torch: each one is, layer for layer
and name for name, the libtorch model of tests/torch/torch_models.hpp, so that initial weights
written here (state_dict names) load there and both trainings can be compared.

  cnn      Fashion-MNIST CNN without BatchNorm: input (batch, 784) pixel / 255, viewed as
           (batch, 1, 28, 28); conv 1->8 (3x3, pad 1), ReLU, max-pool 2; conv 8->16 (3x3,
           pad 1), ReLU, max-pool 2; flatten 16*7*7 = 784; linear 784->64, ReLU; linear 64->10.
  cnn_bn   the same with BatchNorm2d after each convolution (running statistics are buffers),
           and convolutions without bias, as usual before BatchNorm: a bias there has a zero
           gradient in exact arithmetic (BatchNorm subtracts the mean), so its gradient is
           rounding noise that Adam's normalisation turns into full-size steps, and two
           correct implementations would drift apart on it.
  tied     a tied-weight classifier: each image becomes 49 tokens (4x4 average pools of the
           image, quantised to 10 levels); embedding(10, 32) of the tokens, mean over tokens,
           linear 32->32, tanh, then an output layer whose weight IS the embedding's weight
           (logits = h @ embedding.weight^T + bias: 10 classes, one per token level).
"""

import torch
from torch import nn
from torch.nn import functional as F

IMAGE_SIDE = 28
CLASSES = 10
TOKEN_LEVELS = 10  # the tied model's vocabulary: as many token levels as classes
EMBEDDING_DIM = 32


class Cnn(nn.Module):
    def __init__(self, batch_norm: bool):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=not batch_norm)
        self.bn1 = nn.BatchNorm2d(8) if batch_norm else None
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=not batch_norm)
        self.bn2 = nn.BatchNorm2d(16) if batch_norm else None
        self.fc1 = nn.Linear(16 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, CLASSES)

    def forward(self, x):
        x = x.view(-1, 1, IMAGE_SIDE, IMAGE_SIDE)
        x = self.conv1(x)
        if self.bn1 is not None:
            x = self.bn1(x)
        x = F.max_pool2d(F.relu(x), 2)
        x = self.conv2(x)
        if self.bn2 is not None:
            x = self.bn2(x)
        x = F.max_pool2d(F.relu(x), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def image_tokens(x):
    """Returns the (batch, 49) int64 tokens of images x (batch, 784): 4x4 average pools,
    quantised to TOKEN_LEVELS levels."""
    pooled = F.avg_pool2d(x.view(-1, 1, IMAGE_SIDE, IMAGE_SIDE), 4).flatten(1)
    return (pooled * TOKEN_LEVELS).floor().clamp(0, TOKEN_LEVELS - 1).long()


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(TOKEN_LEVELS, EMBEDDING_DIM)
        self.hidden = nn.Linear(EMBEDDING_DIM, EMBEDDING_DIM)
        self.output = nn.Linear(EMBEDDING_DIM, CLASSES)
        self.output.weight = self.embedding.weight  # tied: one tensor, two names

    def forward(self, x):
        h = self.embedding(image_tokens(x)).mean(1)
        return self.output(torch.tanh(self.hidden(h)))


def make_model(kind: str) -> nn.Module:
    """Returns a freshly initialised model of `kind` (cnn, cnn_bn, tied)."""
    if kind == "cnn":
        return Cnn(batch_norm=False)
    if kind == "cnn_bn":
        return Cnn(batch_norm=True)
    if kind == "tied":
        return Tied()
    raise ValueError(f"unknown model kind '{kind}' (cnn, cnn_bn, tied)")

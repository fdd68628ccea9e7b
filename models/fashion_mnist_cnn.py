#!/usr/bin/python3
"""Builds the Fashion-MNIST CNN, scripts it with TorchScript and saves it as
models/fashion_mnist_cnn.pt (what configs/fashion_mnist_cnn.yaml trains; the trainer needs no
Python at run time).

Input: (batch, 1, 28, 28) fp32 pixels / 255 (the trainer's IDX features, model.input_shape
[1, 28, 28]). Output: (batch, 10) class logits. Two conv blocks (3x3 conv, BatchNorm, ReLU,
2x2 max-pool: 16 then 32 channels), then 1568 -> 128 -> 10: 207,018 parameters. The input is
normalised inside the model by Fashion-MNIST's training mean and standard deviation, so the
trainer feeds raw pixel / 255 values.

Usage: /usr/bin/python3 models/fashion_mnist_cnn.py [--output FILE] [--seed S]
(torch 1.13, python3-torch). The initial weights come from torch.manual_seed(S), so the
committed file is reproducible.
"""
import argparse
import os

import torch
from torch import nn

MEAN, STD = 0.2860, 0.3530  # of Fashion-MNIST's 60,000 training images, pixel / 255


class FashionMnistCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                    nn.MaxPool2d(2))
        self.block2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                    nn.MaxPool2d(2))
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)
        self.mean = MEAN
        self.std = STD

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) / self.std
        x = self.block2(self.block1(x))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(here, "fashion_mnist_cnn.pt"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = FashionMnistCnn()
    scripted = torch.jit.script(model)
    out = scripted(torch.zeros(2, 1, 28, 28))
    assert out.shape == (2, 10), out.shape
    scripted.save(args.output)
    params = sum(p.numel() for p in model.parameters())
    print(f"saved {args.output}: {params} parameters")


if __name__ == "__main__":
    main()

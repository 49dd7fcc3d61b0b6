"""The two segmenters of the testbed: a tiny U-Net (plain torch) and a tiny SegFormer (transformers).

Both map ``(B, 1, H, W)`` scans to ``(B, 3, H, W)`` class logits. Each names the layer the SAEs read
(``sae_layer``, a submodule whose output is a conv feature map ``(B, C, h, w)``): for both it is the
feature map the segmentation head reads (U-Net: the last decoder block; SegFormer: the decode head's
fused MLP features after BN+ReLU). Sizes are ours (the paper's are not available).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1),
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
        nn.Conv2d(c_out, c_out, 3, padding=1),
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
    )


class TinyUNet(nn.Module):
    """A 3-level U-Net (channels ``widths``), skip connections by concatenation, 1×1 conv head."""

    def __init__(self, widths: tuple[int, int, int] = (16, 32, 64), n_classes: int = 3):
        super().__init__()
        w1, w2, w3 = widths
        self.enc1, self.enc2, self.bottleneck = _block(1, w1), _block(w1, w2), _block(w2, w3)
        self.up2, self.dec2 = nn.ConvTranspose2d(w3, w2, 2, stride=2), _block(2 * w2, w2)
        self.up1, self.dec1 = nn.ConvTranspose2d(w2, w1, 2, stride=2), _block(2 * w1, w1)
        self.head = nn.Conv2d(w1, n_classes, 1)

    @property
    def sae_layer(self) -> nn.Module:
        return self.dec1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)  # (B, w1, H, W)
        e2 = self.enc2(F.max_pool2d(e1, 2))  # (B, w2, H/2, W/2)
        b = self.bottleneck(F.max_pool2d(e2, 2))  # (B, w3, H/4, W/4)
        d2 = self.dec2(torch.cat([self.up2(b), e2], 1))  # (B, w2, H/2, W/2)
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))  # (B, w1, H, W)
        return self.head(d1)  # (B, n_classes, H, W)


class TinySegFormer(nn.Module):
    """``SegformerForSemanticSegmentation`` (random init, 2 stages, strides 2/2) with logits upsampled to the input."""

    def __init__(self, hidden_sizes=(32, 64), decoder_hidden_size: int = 32, n_classes: int = 3):
        super().__init__()
        from transformers import SegformerConfig, SegformerForSemanticSegmentation

        config = SegformerConfig(
            num_channels=1,
            num_encoder_blocks=2,
            depths=[2, 2],
            sr_ratios=[4, 2],
            hidden_sizes=list(hidden_sizes),
            patch_sizes=[3, 3],
            strides=[2, 2],
            num_attention_heads=[1, 2],
            mlp_ratios=[2, 2],
            decoder_hidden_size=decoder_hidden_size,
            id2label={i: f"LABEL_{i}" for i in range(n_classes)},  # num_labels = n_classes
            drop_path_rate=0.0,
            classifier_dropout_prob=0.0,
        )
        self.net = SegformerForSemanticSegmentation(config)

    @property
    def sae_layer(self) -> nn.Module:
        return self.net.decode_head.activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.net(pixel_values=x).logits  # (B, n_classes, H/2, W/2)
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


ARCHITECTURES = {"unet": TinyUNet, "segformer": TinySegFormer}

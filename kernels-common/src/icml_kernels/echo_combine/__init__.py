"""The echo combination of EchoAttention: target query frames' attention outputs as linear combinations of
anchor frames' per-key-frame partial outputs and the key frames' mean values."""

from icml_kernels.echo_combine.op import echo_combine, echo_combine_op
from icml_kernels.echo_combine.reference import echo_combine_reference

__all__ = ["echo_combine", "echo_combine_op", "echo_combine_reference"]

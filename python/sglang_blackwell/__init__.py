"""sglang-blackwell: SGLang for NVIDIA Blackwell workstation GPUs (SM12x) on PCIe."""

__version__ = "0.1.0"

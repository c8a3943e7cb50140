"""Import-only stand-in (see ../_standin.py)."""
import _standin

_standin.install(globals(), "torchvision", "0.0+cpu-test-standin")

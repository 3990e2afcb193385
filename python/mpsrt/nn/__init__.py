"""`mpsrt.nn`: neural-network functions (`mpsrt.nn.functional`)."""
from . import functional  # noqa: F401

"""Imports every learnable family so that each registers itself."""
from . import fourier, hermite, polycom, rational, slaf, tropical  # noqa: F401

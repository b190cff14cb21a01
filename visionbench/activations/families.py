"""Imports every learnable family so that each registers itself."""

from . import classic, fourier, hermite, kaf, piecewise, polycom, rational, slaf, spline, tropical  # noqa: F401

"""The starting coefficients the rational-activations package ships, which paper 004's runs started from.

004 Sec 3 uses "the accompanying implementation" of Delfosse et al.; App G instantiates it "with
degrees 5 and 4 and version A, initialized to match GELU", and the 004 code builds
`rational.torch.Rational(approx_func="leaky_relu" | "gelu")` with the package defaults (degrees (5, 4),
version A). Such a module does not fit anything: it copies the numbers stored under
"Rational_version_A5/4" -> approx_func in the package's `rational/rationals_config.json`.

    >>> from visionbench.activations.rational_published import published_fit
    >>> published_fit("A", (5, 4), "gelu").numerator[:2]
    (-0.0012423594497499122, 0.5080497063245629)

Convention (package: `rational/torch/rational_pytorch_functions.py`, `Rational_PYTORCH_A_F`, and the
CUDA kernel `rational/_cuda/versions/A.cu`): `init_w_numerator` = a_0..a_m in ascending powers;
`init_w_denominator` = b_1..b_n, b_j multiplying x^j, version A's Q = 1 + sum_j |b_j| |x|^j. This is
visionbench's layout of `Rational.numerator` / `Rational.denominator` for version A, so the lists are
copied as they are (negative b_j included: only |b_j| enters Q).

The "leaky_relu" fit is to negative slope 0.01 (torch's default; the repository later added a separate
"leaky_relu_0.1"): the published F(-3) = -0.042 and F(-1) = -0.011, against -0.03 / -0.01 for slope
0.01 and -0.3 / -0.1 for slope 0.1. Both fits were made on [-3, 3] ("lb": -3, "ub": 3).
"""

from __future__ import annotations

from dataclasses import dataclass

# Where the numbers were read, cited by every entry.
PYPI_SOURCE = (
    "rational-activations 0.2.0 on PyPI (the version `make reference` installs), wheel "
    "rational_activations-0.2.0-py3-none-any.whl, file rational/rationals_config.json "
    "(sha256 312b4031e0ec31ea6709f3b3c025591f68fb5d931c97430ed3296c18e3f8846a)"
)
REPO_SOURCE = (
    "identical numbers in ml-research/rational_activations, rational/rationals_config.json at "
    "commits 685696e374f03d17d18b3038af6424c480d3de55 and 13aef507b2dfa1497a1609298e0c9e7a17f1ee3d"
)


@dataclass(frozen=True)
class PublishedFit:
    """One stored fit: coefficients in visionbench's layout, the fit interval, and where it comes from."""

    numerator: tuple[float, ...]  # a_0..a_m
    denominator: tuple[float, ...]  # b_1..b_n (version A)
    interval: tuple[float, float]
    source: str


_KEY = "Rational_version_A5/4"
PUBLISHED: dict[tuple[str, tuple[int, int], str], PublishedFit] = {
    ("A", (5, 4), "leaky_relu"): PublishedFit(
        numerator=(
            0.029792778657264946,
            0.6183735264987601,
            2.323309062531321,
            3.051936237265109,
            1.4854203263828845,
            0.2510244961111299,
        ),
        denominator=(-1.1419548357285474, 4.393159974992486, 0.8714712309957245, 0.34719662339598834),
        interval=(-3.0, 3.0),
        source=f'{PYPI_SOURCE}, key "{_KEY}" / "leaky_relu"; {REPO_SOURCE}',
    ),
    ("A", (5, 4), "gelu"): PublishedFit(
        numerator=(
            -0.0012423594497499122,
            0.5080497063245629,
            0.41586363182937475,
            0.13022718688035761,
            0.024355900098993424,
            0.00290283948155535,
        ),
        denominator=(-0.06675015696494944, 0.17927646217001553, 0.03746682605496631, 1.6561610853276082e-10),
        interval=(-3.0, 3.0),
        source=f'{PYPI_SOURCE}, key "{_KEY}" / "gelu"; {REPO_SOURCE}',
    ),
}


def available() -> list[str]:
    """The stored (version, degrees, init) combinations, as readable strings for error messages."""
    return [f"version {v}, degrees {d}, init {t}" for v, d, t in sorted(PUBLISHED)]


def published_fit(version: str, degrees: tuple[int, int], init: str) -> PublishedFit:
    """The stored fit for this configuration, or ValueError naming what is available."""
    key = (str(version).upper(), tuple(int(d) for d in degrees), str(init).lower())
    if key not in PUBLISHED:
        raise ValueError(
            f"rational: init_source='rational_activations' has no published coefficients for "
            f"version {key[0]}, degrees {key[1]}, init {key[2]!r}; available: "
            f"{'; '.join(available())} (or init_source='fit' for a fresh least-squares fit)"
        )
    return PUBLISHED[key]

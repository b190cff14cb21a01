"""Print the fit table of docs/activations.md: how closely each learnable family matches GELU and ReLU after
`fit(target, interval=(-3, 3), derivative=True)`, with the tolerance the tests hold it to.

    python scripts/fit_table.py
"""

from visionbench import activations as A


def main() -> None:
    print("| family | target | max \\|F − g\\| | max \\|F′ − g′\\| | tolerance (F, F′) | fit time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in A.names():
        if not A.is_learnable(name):
            continue
        for target in ("gelu", "relu"):
            act = A.create(name)
            act.fit(target)  # warm-up: first call pays one-off costs
            r = act.fit(target)
            tol = A.get_class(name).fit_tolerance[target]
            print(
                f"| {name} | {target} | {r.max_abs_error:.2e} | {r.max_abs_deriv_error:.2e} | "
                f"{tol[0]:.2g}, {tol[1]:.2g} | {r.seconds * 1e3:.1f} ms |"
            )


if __name__ == "__main__":
    main()

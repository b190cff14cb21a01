"""`visionbench bench` end to end on tiny inputs (eager kernels: no timing is asserted), and the
reference implementations it compares against, loaded with visionbench's coefficients. Its errors on
bad flags: test_bad_inputs.py."""

from __future__ import annotations

import re

import pytest
import torch

from visionbench import activations as A
from visionbench.activations import fused
from visionbench.bench import main
from visionbench.bench.references import reference_for
from visionbench.cli import main as cli_main


@pytest.fixture(autouse=True)
def _eager(monkeypatch):
    monkeypatch.setattr(fused, "BACKEND", "eager")


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """A benchmark table's rows by their first cell, each a dict of the cells by column header."""
    rows = [
        [c.strip() for c in re.split(r"(?<!\\)\|", r.strip()[1:-1])]
        for r in text.splitlines()
        if r.startswith("| ") and "---" not in r
    ]  # a cell's own pipe is escaped: \|
    return {cells[0]: dict(zip(rows[0], cells)) for cells in rows[1:]}


def test_bench_activations_writes_a_table(tmp_path):
    args = [
        "activations",
        "--shape",
        "2,4,6,6",
        "--repeats",
        "2",
        "--families",
        "rational,hermite,slaf",
        "--out",
        str(tmp_path),
        "--name",
        "tiny",
    ]
    assert cli_main(["bench", *args]) == 0
    text = (tmp_path / "tiny.md").read_text()
    rows = table_rows(text)
    assert set(rows) == {
        "gelu (baseline)",
        "rational A",
        "rational B",
        "rational C",
        "rational D",
        "hermite",
        "hermite clamp",
        "slaf",
    }
    assert all(float(r["× GELU"]) > 0 for r in rows.values())
    assert float(rows["rational A"]["saved (× input)"]) == pytest.approx(1.0, abs=0.1)  # its input, 10 coefficients
    # CUDA events and kernel counts: none on a CPU, and the table says so instead of failing
    assert {r[c] for r in rows.values() for c in ("GPU ms", "× GELU (GPU)", "kernels")} == {"—"}
    assert "kernels eager (VISIONBENCH_KERNELS=eager)" in text


def test_bench_train_smoke(tmp_path):
    args = [
        "train",
        "recipe=digits_vgg4",
        "act=rational",
        "--compare-to",
        "relu",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--out",
        str(tmp_path),
        "--name",
        "train",
    ]
    assert main(args) == 0
    rows = table_rows((tmp_path / "train.md").read_text())
    assert set(rows) == {"relu", "rational"} and float(rows["rational"]["× baseline step"]) > 0
    assert rows["rational"]["GPU ms"] == rows["rational"]["× baseline (GPU)"] == rows["rational"]["kernels"] == "—"


def test_bench_train_refuses_baseline_which_is_the_reports_key(tmp_path, capsys):
    assert main(["train", "recipe=digits_vgg4", "act=rational", "baseline=relu", "--out", str(tmp_path)]) == 2
    assert "give --compare-to NAME" in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_bench_train_without_baseline_compares_with_the_models_own_activation(tmp_path):
    assert (
        main(
            [
                "train",
                "recipe=digits_vgg4",
                "act=hermite",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--out",
                str(tmp_path),
                "--name",
                "own",
            ]
        )
        == 0
    )
    assert "ReLU (model's own)" in (tmp_path / "own.md").read_text()


def test_paper_polycom_references_match():
    x = torch.randn(2, 5, 3, 3)
    for name in ("polyrelu", "polynorm"):
        act = A.create(name)
        with torch.no_grad():
            act.weight.add_(0.1 * torch.randn_like(act.weight))
        ref, _ = reference_for(act, channel_dim=1)
        torch.testing.assert_close(ref(x), act(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("hermite", {}),
        ("hermite", {"clamp": True}),
        ("fourier", {}),
        ("tropical", {}),
        ("tropical_rational", {}),
        ("rational", {}),
    ],
)
def test_package_references_match(name, kwargs):
    pytest.importorskip("rational.torch" if name == "rational" else "torchortho")
    act = A.create(name, **kwargs).eval()
    ref, _ = reference_for(act, channel_dim=1)
    x = torch.randn(2, 5, 3, 3)
    torch.testing.assert_close(ref(x), act(x), rtol=1e-4, atol=1e-5)


def test_no_reference_for_per_channel_or_slaf():
    assert reference_for(A.create("slaf"), 1) is None
    assert reference_for(A.create("hermite", per_channel=True, num_channels=3), 1) is None
    assert reference_for(A.create("rational", version="B"), 1) is None


def test_bench_fit_reports_each_fit_time_against_a_gelu_step(tmp_path):
    args = ["fit", "--families", "hermite,rational", "--repeats", "1", "--out", str(tmp_path), "--name", "fit"]
    assert cli_main(["bench", *args]) == 0
    text = (tmp_path / "fit.md").read_text()
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in text.splitlines() if r.startswith("| ")][2:]
    assert {(r[0], r[1]) for r in rows} == {
        ("hermite", "gelu"),
        ("hermite", "relu"),
        ("rational", "gelu"),
        ("rational", "relu"),
    }
    for r in rows:
        assert float(r[2]) > 0 and float(r[3]) > 0  # ms and the ratio to GELU's step, no bound asserted
        assert float(r[4]) <= type(A.create(r[0])).fit_tolerance[r[1]][0]


def test_the_kernel_label_names_what_ran_and_the_setting_that_chose_it(monkeypatch):
    """One label (`fused.ran_on`, `fused.switch`) for the benchmark's notes; `visionbench check`'s speed figure names
    the same kernels (check/speed.py, with this benchmark's `Step`)."""
    from visionbench.bench.act_speed import kernel_backend

    monkeypatch.setattr(fused, "BACKEND", "compile")
    monkeypatch.setattr(fused, "SOURCE", "default")
    monkeypatch.setattr(fused, "COMPILE_MIN_NUMEL", 100)
    assert kernel_backend(torch.randn(10)) == "eager (VISIONBENCH_KERNELS=compile; compiled from 100 elements)"
    assert kernel_backend(torch.randn(100)) == "compiled (VISIONBENCH_KERNELS=compile)"
    with fused.use_backend("reference", "trainer.kernels"):
        assert kernel_backend(torch.randn(100)) == "reference (trainer.kernels=reference)"

"""The environment of every run (train/environment.py, data/digest.py) and of every table (report/environment.py):
recorded in summary.json, named in each table's footer, mixed environments flagged, refused with --strict-env.

    .venv/bin/python -m pytest tests/test_environment.py -q
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

import pytest

from visionbench import config, data
from visionbench.activations import fused
from visionbench.data import digest
from visionbench.report import main as report_main
from visionbench.results import layout
from visionbench.results.provenance import PACKAGES
from visionbench.sweep.preflight import load_config
from visionbench.train.environment import ENV_VARS, environment

from .fixtures import write_tiny_imagenet
from .fixtures_fashion_mnist import write_fmnist
from .helpers import copy_tree, write_recipe


@pytest.fixture(autouse=True)
def _cache_home(tmp_path, monkeypatch):
    """The digest cache of these tests in their own folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def digits_file() -> Path:
    return Path(str(resources.files("sklearn.datasets.data") / "digits.csv.gz"))


# ---- what a run records ------------------------------------------------------------------------------------
def test_environment_names_every_key():
    env = environment()
    assert set(env) == {"python", "packages", "git_commit", "device", "threads", "determinism", "kernels", "env"}
    assert set(env["kernels"]) == {"backend", "from", "compile_min_numel", "triton"}
    assert env["kernels"]["backend"] in fused.BACKENDS and env["kernels"]["triton"]  # the pinned torch brings Triton
    assert env["kernels"]["compile_min_numel"] == fused.compile_min_numel()
    assert set(env["packages"]) == set(PACKAGES) and env["packages"]["torch"] and env["packages"]["scikit-learn"]
    assert set(env["device"]) == {"cpu", "cpu_capability", "machine", "gpu", "cuda", "cudnn"}
    assert env["device"]["cpu_capability"] and env["device"]["machine"]
    assert set(env["determinism"]) == {"deterministic_algorithms", "cudnn_deterministic", "cudnn_benchmark"}
    assert set(env["env"]) == set(ENV_VARS) and isinstance(env["threads"], int)


@pytest.mark.parametrize(
    "env,want",
    [
        ({}, ("reference", "trainer.kernels")),
        ({"VISIONBENCH_KERNELS": "eager"}, ("eager", "VISIONBENCH_KERNELS")),
        ({"VISIONBENCH_FAST": "0"}, ("reference", "VISIONBENCH_FAST")),
    ],
)
def test_a_runs_kernels_are_its_key_unless_a_variable_wins(env, want, monkeypatch):
    for name in ("VISIONBENCH_KERNELS", "VISIONBENCH_COMPILE", "VISIONBENCH_FAST"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = fused.record()
    for run in (
        {"trainer": {"kernels": "reference"}},
        config.typed(config.run_config(load_config(["trainer.kernels=reference"]), "relu", 0)),
    ):  # config.yaml's dict, the typed config
        kernels = environment(run)["kernels"]
        assert (kernels["backend"], kernels["from"]) == want
    assert environment({"trainer": {}})["kernels"]["backend"] == (want[0] if env else "auto")  # a config from before
    assert fused.record() == before  # recording changes nothing


def test_a_run_records_its_environment_and_the_digest_of_the_digits(relu_pair):
    summary = layout.read_summary(relu_pair / "digits_vgg4" / "relu" / "seed_0")
    env = summary["environment"]
    assert set(environment()) <= set(env)
    assert env["kernels"]["backend"] == "auto" and env["kernels"]["compile_min_numel"] == fused.compile_min_numel()
    assert env["data"]["sha256"] == sha256(digits_file()) == env["data"]["files"]["digits.csv.gz"]
    assert env["git_commit"] == summary["git_commit"] and env["threads"] == summary["threads"]
    assert {"scipy", "scikit-learn"} <= set(summary["versions"])  # the older field, kept for older readers


def test_file_digests_are_cached_and_a_broken_cache_is_rewritten(tmp_path, monkeypatch):
    files = [tmp_path / "a.bin", tmp_path / "sub" / "b.bin"]
    files[1].parent.mkdir()
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * 1000)
    reads = []
    real = digest._sha256
    monkeypatch.setattr(digest, "_sha256", lambda p: reads.append(p) or real(p))
    first = digest.of_contents(files)
    assert len(reads) == 2 and first["files"] == {"a.bin": sha256(files[0]), "sub/b.bin": sha256(files[1])}
    assert digest.of_contents(files) == first and len(reads) == 2  # from the cache
    files[0].write_bytes(b"changed")  # another size: read again
    assert digest.of_contents(files)["sha256"] != first["sha256"] and len(reads) == 3
    digest.cache_path().write_text("{torn")
    assert digest.of_contents([files[1]])["sha256"] == sha256(files[1])  # a single file: its own digest
    assert str(files[1].resolve()) in json.loads(digest.cache_path().read_text())  # rewritten whole


def test_each_dataset_names_its_data(tmp_path, cifar_root):
    cifar = data.create_datamodule({"name": "cifar10", "root": str(cifar_root)}, batch_size=8)
    assert sorted(cifar.data_digest()["files"]) == sorted(
        [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]
    )
    write_fmnist(tmp_path / "f" / "fashion-mnist", gz=True)
    fmnist = data.create_datamodule({"name": "fashion_mnist", "root": str(tmp_path / "f")}, batch_size=8)
    assert len(fmnist.data_digest()["files"]) == 4
    tiny_root = write_tiny_imagenet(tmp_path / "t")
    tiny = data.create_datamodule({"name": "tiny_imagenet", "root": str(tiny_root)}, batch_size=8)
    listed = tiny.data_digest()
    assert listed["of"] == digest.LISTING and listed["n_files"] == 4 * 5 + 8
    val = tiny_root / "tiny-imagenet-200" / "val"
    image = next((val / "images").iterdir())
    image.rename(image.with_name("renamed.JPEG"))
    annotations = val / "val_annotations.txt"
    annotations.write_text(annotations.read_text().replace(image.name, "renamed.JPEG"))
    again = data.create_datamodule({"name": "tiny_imagenet", "root": str(tiny_root)}, batch_size=8).data_digest()
    assert again["sha256"] != listed["sha256"]
    synthetic = data.create_datamodule({"name": "synthetic"}, batch_size=8).data_digest()
    assert synthetic["of"] == "synthetic" and "sha256" not in synthetic


# ---- what the report makes of it ----------------------------------------------------------------------------
def with_environment(run: Path, **packages) -> None:
    """Give a written run (tests.helpers.write_run) this machine's environment with `packages` changed."""
    summary = layout.read_summary(run)
    env = environment()
    env["packages"].update(packages)
    env["data"] = {"sha256": "ab" * 32, "of": "contents", "files": {"x": "ab" * 32}}
    layout.write_summary(run, {**summary, "environment": env})


@pytest.fixture
def two_timms(tmp_path):
    """relu seeds 0-2 with timm 1.0.31, gelu seeds 0-2 with timm 1.0.32; git commits differ too (not compared)."""
    recipe = write_recipe(tmp_path, "toy", {"relu": [90.0, 90.4, 89.8], "gelu": [90.9, 91.2, 90.7]})
    for act, timm in (("relu", "1.0.31"), ("gelu", "1.0.32")):
        for seed in range(3):
            with_environment(recipe / act / f"seed_{seed}", timm=timm)
    summary = layout.read_summary(recipe / "relu" / "seed_0")
    summary["environment"]["git_commit"] = "0123456789abcdef+dirty"
    layout.write_summary(recipe / "relu" / "seed_0", summary)
    return recipe


def test_mixed_environments_are_named_above_the_table_and_in_its_footer(two_timms, capsys):
    assert report_main([str(two_timms)]) == 0
    md = (two_timms / "table.md").read_text()
    notes = md.split("Notes:\n")[1].splitlines()
    assert notes[0].startswith("- MIXED ENVIRONMENTS: ")
    assert "timm: 1.0.31 (relu seeds 0, 1, 2), 1.0.32 (gelu seeds 0, 1, 2)" in notes[0]
    assert "git_commit" not in notes[0] and "0123456" not in notes[0]  # commits are not compared
    footer = md.rstrip("\n").splitlines()[-1]
    assert footer.startswith("Environment: python ") and footer.endswith("+ 1 other environment, see above")
    assert "timm 1.0.32" in footer  # the tie goes to the first run in the table's order (gelu)


def test_runs_on_different_kernels_are_mixed_environments(tmp_path):
    """The kernel backend is in no config hash (results/identity.py): a table whose runs ran on two is flagged."""
    recipe = write_recipe(tmp_path, "toy", {"relu": [90.0, 90.4], "gelu": [90.9, 91.2]})
    for act, backend in (("relu", "auto"), ("gelu", "reference")):
        for seed in range(2):
            run = recipe / act / f"seed_{seed}"
            with_environment(run)
            summary = layout.read_summary(run)
            summary["environment"]["kernels"].update(backend=backend, **{"from": "trainer.kernels"})
            layout.write_summary(run, summary)
    assert report_main([str(recipe)]) == 0
    notes = (recipe / "table.md").read_text().split("Notes:\n")[1].splitlines()
    assert notes[0].startswith("- MIXED ENVIRONMENTS: ")
    assert "backend: auto (relu seeds 0, 1), reference (gelu seeds 0, 1)" in notes[0]


def test_strict_env_refuses_in_one_line_and_writes_nothing(two_timms, capsys):
    assert report_main([str(two_timms), "--strict-env"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "timm: 1.0.31 (relu seeds 0, 1, 2)" in err and "--strict-env" in err
    assert not list(two_timms.glob("table.*"))


def test_one_environment_passes_strict_env_and_its_footer_is_deterministic(relu_pair, tmp_path, capsys):
    tree = copy_tree(relu_pair, tmp_path / "r")
    assert report_main([str(tree), "--strict-env", "--no-plots"]) == 0
    recipe = tree / "digits_vgg4"
    md, tex, csv = ((recipe / f"table.{f}").read_text() for f in ("md", "tex", "csv"))
    footer = md.rstrip("\n").splitlines()[-1]
    assert "MIXED ENVIRONMENTS" not in md and footer.startswith("Environment: python ")
    assert f"data sha256 {sha256(digits_file())[:12]}" in footer and " kernels, " in footer
    assert r"\footnotesize Environment: python" in tex and "Environment" not in csv
    assert report_main([str(tree), "--no-plots"]) == 0
    assert (recipe / "table.md").read_text() == md  # byte for byte


def test_runs_from_before_the_environment_still_report(tmp_path, capsys):
    recipe = write_recipe(tmp_path, "toy", {"relu": [90.0, 90.4], "gelu": [90.9, 91.2]})
    assert report_main([str(recipe)]) == 0
    md = (recipe / "table.md").read_text()
    assert md.rstrip("\n").splitlines()[-1] == "Environment: torch x"  # built from `versions`
    with_environment(recipe / "gelu" / "seed_0", torch="x")  # a new run among old ones: what they all know is alike
    summary = layout.read_summary(recipe / "relu" / "seed_1")
    layout.write_summary(recipe / "relu" / "seed_1", {k: v for k, v in summary.items() if k != "versions"})
    assert report_main([str(recipe), "--strict-env"]) == 0
    assert "MIXED ENVIRONMENTS" not in (recipe / "table.md").read_text()


@pytest.mark.slow  # a sweep's run in a worker process (12 s): make test-slow
def test_a_sweep_records_the_kernels_its_run_was_given(tmp_path, monkeypatch):
    """`trainer.kernels=reference` on the command line: the run trains on the plain formulas, and its summary says so
    and where it came from (the key; a variable would win over it: test above)."""
    from visionbench.cli import main as cli

    for name in ("VISIONBENCH_KERNELS", "VISIONBENCH_FAST", "VISIONBENCH_COMPILE"):
        monkeypatch.delenv(name, raising=False)
    assert (
        cli(
            [
                "run",
                "act=rational",
                "seeds=1",
                "epochs=1",
                "data.limit_train=64",
                "data.limit_val=32",
                "snapshot_epochs=[]",
                "trainer.kernels=reference",
                f"results_dir={tmp_path}",
            ]
        )
        == 0
    )
    kernels = layout.read_summary(tmp_path / "digits_vgg4" / "rational" / "seed_0")["environment"]["kernels"]
    assert (kernels["backend"], kernels["from"]) == ("reference", "trainer.kernels")
    assert fused.backend() == "auto"  # the run's key ended with the run

import os

import pytest
import torch

from .fixtures import write_cifar10, write_imagenet, write_tiny_imagenet

# 2-core machines shared with other processes: one intra-op thread keeps tests predictable (two
# threads contending with a busy core made an LSUV test go from 3 s to 87 s)
torch.set_num_threads(int(os.environ.get("VISIONBENCH_TEST_THREADS", "1")))
# without a GPU the Triton kernels run in Triton's CPU interpreter (tests/test_triton_kernels.py); it is chosen when a
# kernel is defined, so before anything imports them. The default backend still picks them on CUDA tensors only.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path_factory, monkeypatch):
    """Every test runs in a fresh empty working directory: a command that falls back on the default results_dir
    (`runs/`), or writes lightning_logs/, writes there, never into the repository (where a user's `make run` keeps
    its runs, and the committed results/ sit). Tests name the repository by its path (tests/helpers.ROOT)."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(autouse=True)
def _no_plots(request, monkeypatch):
    """Reports draw no figures (curves, learned shapes, the suite's diagrams) in a test that does not look at
    them: a figure costs a second or more of matplotlib and is checked only where the test is marked `plots`."""
    if request.node.get_closest_marker("plots") is None:
        from visionbench.report import figures

        monkeypatch.setattr(figures, "make_plots", lambda *args, **kwargs: [])
        monkeypatch.setattr(figures, "plot_cd", lambda *args, **kwargs: None)
        monkeypatch.setattr(figures, "plot_improvement", lambda *args, **kwargs: None)


@pytest.fixture(scope="session")
def trained_tree(tmp_path_factory):
    """`trained_tree(*overrides)`: the results directory of one sweep (`run_sweep`) on the embedded digits data with
    `tests.helpers.FAST` and `overrides`, trained once per session (per xdist worker) and cached by its overrides.
    Every run must complete. Shared: never change it; `copy_tree(trained_tree(...), tmp_path / "r")` and damage,
    resume or extend the copy. Request it (or a fixture built on it, like `relu_pair`) as a fixture argument, so that it
    is set up before any function-scoped monkeypatch (a crash, a full disk) of the test."""
    from visionbench.sweep.preflight import load_config
    from visionbench.sweep.sweep import run_sweep

    from .helpers import FAST

    cache: dict[tuple[str, ...], object] = {}

    def trained(*overrides: str):
        if overrides not in cache:
            results = tmp_path_factory.mktemp("trained")
            outcomes = run_sweep(load_config([f"results_dir={results}", *FAST, *overrides]), progress=False)
            assert [o.status for o in outcomes] == ["completed"] * len(outcomes), [o.summary for o in outcomes]
            cache[overrides] = results
        return cache[overrides]

    return trained


@pytest.fixture(scope="session")
def relu_pair(trained_tree):
    """relu seeds 0 and 1, completed (`FAST`: 2 epochs): the sweep most tests resume, damage or estimate."""
    return trained_tree("act=relu", "seeds=2")


@pytest.fixture(scope="session")
def cifar_root(tmp_path_factory):
    return write_cifar10(tmp_path_factory.mktemp("cifar"))


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory):
    return write_tiny_imagenet(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def imagenet_root(tmp_path_factory):
    return write_imagenet(tmp_path_factory.mktemp("imagenet"))


@pytest.fixture
def crash_in_epoch_3(monkeypatch):
    """Training raises at the start of epoch 3 (a kill, seen from the run); call the returned
    function to stop crashing, e.g. before resuming."""
    from visionbench.train import callbacks

    original = callbacks.EpochSeeder.on_train_epoch_start

    def crash(self, trainer, pl_module):
        if trainer.current_epoch == 2:
            raise RuntimeError("simulated kill")
        original(self, trainer, pl_module)

    monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", crash)
    return lambda: monkeypatch.setattr(callbacks.EpochSeeder, "on_train_epoch_start", original)

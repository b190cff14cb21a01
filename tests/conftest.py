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


# the trained trees of this session (`trained_tree`), each with what its files were when it was trained
_TRAINED: dict = {}


def _fingerprint(root) -> dict:
    """Every file and folder under `root` with its mode, size and modification time (a change to any shows)."""
    return {
        str(p.relative_to(root)): (st.st_mode, st.st_size, st.st_mtime_ns)
        for p in [root, *sorted(root.rglob("*"))]
        for st in (p.lstat(),)
    }


@pytest.fixture(autouse=True)
def _trained_trees_unchanged(request):
    """After a test that used `trained_tree` (or a fixture built on it), every cached tree is as trained: the write
    bits taken away stop a test that changes one where it does, unless it runs as root, which this check catches."""
    yield
    if "trained_tree" in request.fixturenames:
        for root, trained in _TRAINED.items():
            now = _fingerprint(root)
            changed = sorted(k for k in trained.keys() | now.keys() if trained.get(k) != now.get(k))
            assert not changed, (
                f"the test changed the shared trained tree {root} ({', '.join(changed[:5])}): "
                f"change a copy (tests/helpers.py's copy_tree)"
            )


@pytest.fixture(scope="session")
def trained_tree(tmp_path_factory):
    """`trained_tree(*deltas)`: the results directory of one sweep (`run_sweep`) on the embedded digits data with
    `tests.helpers.shrunk(*deltas)`, trained once per session (per xdist worker) and cached by the overrides that
    configure it, whatever their order (`tests.helpers.normalised`): `trained_tree("seeds=2", "act=relu")` is
    `relu_pair`'s tree, and so is `trained_tree("act=relu", "seeds=2", "epochs=2")`. Every run must complete.
    Read-only (its write bits taken away, given back when the session ends; `_trained_trees_unchanged` checks it after
    each test that uses it): `copy_tree(trained_tree(...), tmp_path / "r")` and damage, resume or extend the writable
    copy. Request it (or a fixture built on it, like `relu_pair`) as a fixture argument, so that it is set up before
    any function-scoped monkeypatch (a crash, a full disk) of the test."""
    from visionbench.sweep.preflight import load_config
    from visionbench.sweep.sweep import run_sweep

    from .helpers import normalised, set_writable, shrunk

    cache: dict[tuple[tuple[str, str], ...], object] = {}

    def trained(*deltas: str):
        overrides = shrunk(*deltas)
        key = normalised(overrides)
        if key not in cache:
            results = tmp_path_factory.mktemp("trained")
            outcomes = run_sweep(load_config([f"results_dir={results}", *overrides]), progress=False)
            assert [o.status for o in outcomes] == ["completed"] * len(outcomes), [o.summary for o in outcomes]
            set_writable(results, False)
            _TRAINED[results] = _fingerprint(results)
            cache[key] = results
        return cache[key]

    yield trained
    for results in cache.values():  # pytest removes old temporary folders; writable, as anything else there
        set_writable(results, True)
        _TRAINED.pop(results, None)


@pytest.fixture(scope="session")
def relu_pair(trained_tree):
    """relu seeds 0 and 1, completed (the shrink: 2 epochs): the sweep most tests resume, damage or estimate."""
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

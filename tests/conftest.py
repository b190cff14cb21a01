import os

import pytest
import torch

from .fixtures import write_cifar10, write_imagenet, write_tiny_imagenet

# 2-core machines shared with other processes: one intra-op thread keeps tests predictable (two
# threads contending with a busy core made an LSUV test go from 3 s to 87 s)
torch.set_num_threads(int(os.environ.get("VISIONBENCH_TEST_THREADS", "1")))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


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

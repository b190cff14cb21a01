"""CIFAR-10's batches are python pickles: a received dataset folder's batch that pickles a call is refused in one line,
never run (data/cifar10.py `_DataOnly`, docs/reproducing.md "Files from someone else"); real batches still load."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from visionbench.data import cifar10

from .fixtures import write_cifar10


class _Planted:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):  # what a planted batch would do on load: here, create a file
        return (open, (self.marker, "w"))


def test_a_batch_that_pickles_a_call_is_refused_and_never_run(tmp_path):
    root = write_cifar10(tmp_path)
    batch = next(root.rglob("data_batch_1"))
    marker = tmp_path / "MARKER"
    entry = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1], b"payload": _Planted(marker)}
    batch.write_bytes(pickle.dumps(entry, protocol=2))
    with pytest.raises(ValueError, match=r"data_batch_1.*pickles io\.open, code rather than data; refused"):
        cifar10.read_batch(batch)
    assert not marker.exists()


def test_real_batches_load(tmp_path):
    root = write_cifar10(tmp_path)
    images, labels = cifar10.read_batch(next(root.rglob("data_batch_1")))
    assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3) and len(labels) == len(images)

import os

import pytest
import torch

# 2-core machines: one thread each keeps tests predictable and parallel helpers polite
torch.set_num_threads(int(os.environ.get("VISIONBENCH_TEST_THREADS", "2")))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

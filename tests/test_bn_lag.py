"""scripts/bn_lag.py: a BatchNorm whose running statistics lag the weights is told apart from the same
network scored with each batch's own statistics (docs/fashion_mnist.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bn_lag.py"
spec = importlib.util.spec_from_file_location("bn_lag", SCRIPT)
bn_lag = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bn_lag)


def batches(n: int = 512, size: int = 64, seed: int = 0):
    """Two classes told apart by the sign of the feature after centring at 5 (the data's mean)."""
    g = torch.Generator().manual_seed(seed)
    x = 5.0 + torch.randn(n, 1, generator=g)
    y = (x[:, 0] > 5.0).long()
    return [(x[i : i + size], y[i : i + size]) for i in range(0, n, size)]


def network(running_mean: float) -> nn.Module:
    """BatchNorm then a fixed linear read-out of the sign: right only once the data are centred."""
    bn = nn.BatchNorm1d(1, affine=False)
    bn.running_mean.fill_(running_mean)
    out = nn.Linear(1, 2)
    with torch.no_grad():
        out.weight.copy_(torch.tensor([[-1.0], [1.0]]))
        out.bias.zero_()
    return nn.Sequential(bn, out)


def test_lagging_running_statistics_lose_accuracy_that_batch_statistics_keep():
    loader = batches()
    eval_mode = bn_lag.top1(network(running_mean=0.0), loader, batch_stats=False)  # never caught up with 5
    batch = bn_lag.top1(network(running_mean=0.0), loader, batch_stats=True)
    caught_up = bn_lag.top1(network(running_mean=5.0), loader, batch_stats=False)
    share_positive = 100.0 * float(torch.cat([y for _, y in loader]).float().mean())
    assert eval_mode == share_positive  # every input reads as positive: only that class is right
    assert batch > 95.0 and caught_up > 95.0  # centred by each batch itself, or by a settled running mean


def test_the_script_refuses_a_folder_without_completed_runs(tmp_path, capsys):
    assert bn_lag.main([str(tmp_path)]) == 2
    assert "no completed run with checkpoints/best.ckpt under" in capsys.readouterr().err
    assert bn_lag.main([str(tmp_path / "missing")]) == 2
    assert "usage: python scripts/bn_lag.py DIR [DIR ...]" in capsys.readouterr().err

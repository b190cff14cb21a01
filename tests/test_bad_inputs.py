"""Bad input, in one table: every bad command line of `visionbench` (run, estimate, report, papers, bench,
plot) fails before anything runs — the exit code (2), one line on stderr naming the key or flag and what it
accepts (no traceback), and nothing written: neither the results_dir or --out folder the command names (under
the test's tmp_path, "{tmp}" in the row) nor anything in the working directory (tmp_path too).

A `run` row is the default recipe's sweep (4 activations x 3 seeds) plus the bad value: its one line means the
value is checked once, before any run, not in every run. A row's expected text names the key or flag.

Where a bad input needs a file to exist, a placeholder names it (SETUP below): "{report_tree}" is a results
tree of two activations with curves, "{not_weights}" a text file. The corrupt files of a run directory or a
dataset, which fail a run rather than the command line, are in test_reliability.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from visionbench.cli import main

from .fixtures import write_cifar10
from .helpers import write_recipe

R = "results_dir={tmp}/results"  # where `run` and `estimate` would write
OUT = "--out={tmp}/out"  # where `bench` would write


def bad(argv: list[str], code: int, text: str):
    """A row: the command as typed (after `visionbench`), its exit code, text of its one line on stderr.
    The id is the command without the placeholders of where it would write."""
    return pytest.param(argv, code, text, id=" ".join(a for a in argv if a not in (R, OUT)))


BAD_INPUTS = [
    # ---- run: unknown keys (with "did you mean" for typos), recipes, activations and their variants
    bad(["run", R, "foo=1"], 2, "unknown key 'foo'; every key and its default: docs/configuration.md"),
    bad(["run", R, "optim.nam=adamw"], 2, "unknown key 'optim.nam' (did you mean optim.name"),
    bad(["run", R, "optim.lrr=0.1"], 2, "unknown key 'optim.lrr' (did you mean optim.lr"),
    bad(["run", R, "optim.nesterof=true"], 2, "unknown key 'optim.nesterof' (did you mean optim.nesterov"),
    bad(["run", R, "--foo"], 2, "expected key=value, got '--foo'"),
    bad(["run", R, "recipe=nope"], 2, "unknown recipe 'nope'; `visionbench list` lists the 20 recipes"),
    bad(["run", R, "act=relux"], 2, "unknown activation 'relux' (did you mean relu"),
    bad(["run", R, "act=relux[a=1]"], 2, "unknown activation 'relux' (did you mean relu"),
    bad(["run", R, "act=rational[init=nope]"], 2, "act rational[init=nope]: rational: unknown init 'nope'; accepted: "),
    bad(["run", R, "act=rational[init]"], 2, "activation variant 'rational[init]': expected key=value inside [...]"),
    bad(["run", R, "act=rational[]"], 2, "activation variant 'rational[]': no options inside [...]"),
    bad(
        ["run", R, "act=rational[init=gelu]x"], 2, "activation variant 'rational[init=gelu]x': expected name[key=value"
    ),
    bad(["run", R, "act=rational[init=gelu"], 2, "unbalanced brackets or quotes in 'rational[init=gelu'"),
    bad(["run", R, "act=relu", "act.degree=3"], 2, "no activation in the sweep (relu) takes option 'degree'; relu: "),
    bad(["run", R, "act=rational", "act.version=Z"], 2, "act rational: rational: unknown version 'Z'; accepted: A, B"),
    bad(
        ["run", R, "act=relu,,gelu"],
        2,
        "act=relu,,gelu: an empty name between commas; separate the activations with single commas",
    ),
    bad(["run", R, "act=relu,relu"], 2, "act=relu,relu lists relu more than once; give each activation once"),
    bad(["run", R, "act=relu,gelu,ReLU"], 2, "lists relu more than once"),
    bad(
        ["run", R, "act=all[init=gelu]"],
        2,
        "act=all[init=gelu]: options cannot be given to all (its activations "
        "take different options); write act=all act.init=gelu",
    ),
    bad(["run", R, "act_lr_mult.relu=-2"], 2, "act_lr_mult must be a mapping {act: multiplier > 0}"),
    # ---- run: values of the wrong type or out of range, key by key
    bad(["run", R, "epochs=abc"], 2, "epochs must be an integer >= 1, got 'abc'"),
    bad(["run", R, "seeds=0"], 2, "seeds must be an integer >= 1 or auto (seeds in rounds), got 0"),
    bad(["run", R, "seeds=sometimes"], 2, "seeds must be an integer >= 1 or auto (seeds in rounds), got 'sometimes'"),
    bad(["run", R, "parallel=0"], 2, "parallel must be an integer >= 1 or one of auto, got 0"),
    bad(
        ["run", R, "trainer.mps=true"],
        2,
        "trainer.mps=true needs CUDA (NVIDIA's Multi-Process Service); this run trains on the CPU: drop trainer.mps",
    ),
    bad(
        ["run", R, "trainer.compile=fast"],
        2,
        "trainer.compile must be true, false or reduce-overhead (the captured step), got 'fast'",
    ),
    bad(["run", R, "batch_size=0"], 2, "batch_size must be an integer >= 1"),
    bad(["run", R, "batch_size=-5"], 2, "batch_size must be an integer >= 1"),
    bad(["run", R, "batch_size=abc"], 2, "batch_size must be an integer >= 1, got 'abc'"),
    bad(["run", R, "data.val_split=1.5"], 2, "data.val_split must be a number >= 0 and < 1"),
    bad(["run", R, "data.num_workers=-1"], 2, "data.num_workers must be an integer >= 0"),
    bad(["run", R, "data.name=mnist"], 2, "unknown dataset data.name='mnist'; known: cifar10, digits"),
    bad(["run", R, "data.img_size=0"], 2, "data.img_size must be null or an integer >= 1"),
    bad(["run", R, "data.limit_train=0"], 2, "data.limit_train must be null or an integer >= 1"),
    bad(["run", R, "data.mean=[0.5,0.5]"], 2, "data.mean has 2 values, digits has 1 channels"),
    bad(["run", R, "data.on_device=yes"], 2, "data.on_device must be true or false"),
    bad(
        ["run", R, "data.on_device=true", "data.augment.auto_augment=rand-m9-mstd0.5-inc1"],
        2,
        "data.on_device=true cannot draw data.augment.auto_augment=rand-m9-mstd0.5-inc1: it supports "
        "data.augment.crop_pad, data.augment.hflip and the normalisation only; set data.on_device=false or drop "
        "data.augment.auto_augment",
    ),
    bad(
        ["estimate", R, "data.on_device=true", "data.augment.re_prob=0.25"],
        2,
        "data.on_device=true cannot draw data.augment.re_prob=0.25",
    ),
    bad(
        ["run", R, "data.on_device=true", "data.img_size=16"],
        2,
        "data.on_device=true does not resize: data.img_size=16 differs from digits's 8 px",
    ),
    bad(
        ["run", R, "recipe=tinyimagenet_vit_s8", "data.on_device=true"],
        2,
        "data.on_device=true needs a dataset held in memory as arrays (cifar10, digits, fashion_mnist, synthetic), "
        "not data.name=tiny_imagenet",
    ),
    bad(["run", R, "data.augment.hflip=2"], 2, "data.augment.hflip must be a number >= 0 and <= 1"),
    bad(
        ["run", R, "data.augment.repeated_aug_epoch=full"],
        2,
        "data.augment.repeated_aug_epoch must be one of expand, deit",
    ),
    bad(
        ["run", R, "data.augment.auto_augment_impl=tv"],
        2,
        "data.augment.auto_augment_impl must be one of timm, torchvision",
    ),
    bad(["run", R, "model.name=vgg44"], 2, "model.name=vgg44, model.norm=group: unknown model 'vgg44'; accepted: "),
    bad(
        ["run", R, "model.norm=batch"],
        2,
        "model.name=vgg4, model.norm=batch: unknown norm 'batch'; accepted: group or None",
    ),
    bad(
        ["run", R, "model.norm_free=true"],
        2,
        "model.norm_free=True: norm_free is not supported by 'vgg4'; supported models: vit_s8",
    ),
    bad(
        ["run", R, "model.lsuv_variant=paper"],
        2,
        "model.lsuv_variant must be one of mishkin, paper004 (did you mean paper004?)",
    ),
    bad(["run", R, "model.global_pool=3"], 2, "model.global_pool must be null or a non-empty string, got 3"),
    bad(["run", R, "trainer.precision=77"], 2, "trainer.precision must be one of 64-true, 32-true"),
    bad(["run", R, "trainer.devices=abc"], 2, "trainer.devices=abc: `devices`"),
    bad(["run", R, "trainer.strategy=bogus"], 2, "trainer.strategy=bogus: You selected an invalid strategy name"),
    bad(["run", R, "optim.lr=-1"], 2, "optim.lr must be a number >= 0, got -1"),
    bad(["run", R, "optim.lr=nan"], 2, "optim.lr must be a finite number >= 0, got nan"),
    bad(["run", R, "optim.lr=inf"], 2, "optim.lr must be a finite number >= 0, got inf"),
    bad(["run", R, "loss.mixup=-inf"], 2, "loss.mixup must be a finite number >= 0, got -inf"),
    bad(["run", "results_dir="], 2, "results_dir must be a non-empty path, got ''"),
    bad(["run", R, "data.root="], 2, "data.root must be null or a non-empty path, got ''"),
    bad(["run", R, "optim.nesterov=maybe"], 2, "optim.nesterov must be true or false, got 'maybe'"),
    bad(["run", R, "optim.betas=[0.9]"], 2, "optim.betas must be a list of 2 values"),
    bad(
        ["run", R, "optim.decay_rule=ndims"],
        2,
        "optim.decay_rule must be one of conv_linear, ndim (did you mean ndim?)",
    ),
    bad(["run", R, "sched.milestones=[0]"], 2, "sched.milestones must be a list, each an integer >= 1"),
    bad(["run", R, "loss.label_smoothing=1.0"], 2, "loss.label_smoothing must be a number >= 0 and < 1"),
    bad(["run", R, "ema.decay=1.5"], 2, "ema.decay must be null or a number > 0 and < 1"),
    bad(["run", R, "finetune.train=everything"], 2, "finetune.train must be one of act,head, act, head, all"),
    bad(
        ["run", R, "finetune.checkpoint={not_weights}"],
        2,
        "finetune.checkpoint: {not_weights} is not a readable torch checkpoint",
    ),
    bad(
        ["run", R, "finetune.checkpoint={other_arch}"],
        2,
        "finetune.checkpoint: {other_arch} does not match VGG (the classifier head.* excluded): 16 missing: ",
    ),
    bad(
        ["run", R, "finetune.checkpoint={other_arch}", "finetune.source_act=nope"],
        2,
        "finetune.source_act: unknown activation 'nope'; `visionbench list` lists the ",
    ),
    bad(
        ["run", R, "finetune.source_act=gelu"],
        2,
        "finetune.source_act=gelu is not used: it names the activation a "
        "finetune.checkpoint was trained with, and none is set; drop it",
    ),
    # ---- run: the dataset (checked once, before the first run; one line)
    bad(
        ["run", R, "recipe=cifar10_vgg8", "data.root={tmp}/datasets"],
        2,
        "CIFAR-10 not found at {tmp}/datasets/cifar-10-batches-py; data root: {tmp}/datasets (from data.root); "
        "expected layout: cifar-10-batches-py/data_batch_1 .. data_batch_5, test_batch",
    ),
    bad(  # estimate prices a missing dataset of known shape on a stand-in (tests/test_estimate_stand_in.py); yours:
        ["estimate", R, "data.name=folder", "data.root={tmp}/datasets"],
        2,
        "{tmp}/datasets (data.name=folder, root from data.root) is not a folder; point data.root at the folder",
    ),
    bad(
        ["run", R, "recipe=cifar10_vgg4", "data.root={cifar_without_data_batch_4}"],
        2,
        "CIFAR-10 at {cifar_without_data_batch_4}/cifar-10-batches-py (from data.root) lacks data_batch_4 (it needs "
        "data_batch_1 .. data_batch_5 and test_batch); copy the missing file(s)",
    ),
    bad(
        ["run", R, "recipe=cifar10_vgg4", "data.root={cifar_without_test_batch}"],
        2,
        "CIFAR-10 at {cifar_without_test_batch}/cifar-10-batches-py (from data.root) lacks test_batch",
    ),
    bad(
        ["run", R, "recipe=fashion_mnist_slaf", "data.root={fmnist_empty_test}"],
        2,
        "fashion_mnist at {fmnist_empty_test} (from data.root): its official test set holds 0 images; every split "
        "(train, val, test) needs at least one image",
    ),
    bad(
        ["run", R, "recipe=fashion_mnist_slaf", "data.root={fmnist_empty_train}"],
        2,
        "fashion_mnist at {fmnist_empty_train} (from data.root): its official training set holds 0 images",
    ),
    bad(
        ["estimate", R, "recipe=fashion_mnist_slaf", "data.root={fmnist_empty_test}"],
        2,
        "its official test set holds 0 images",
    ),
    # ---- run: values only a typo reaches, and keys a sweep sets itself
    bad(
        ["run", R, "batch_size=99999999999999999999"],
        2,
        "batch_size must be an integer >= 1 and <= 2147483647, got 99999999999999999999",
    ),
    bad(
        ["run", R, "seeds=99999999999999999999"],
        2,
        "seeds must be an integer >= 1 and <= 10000 or auto (seeds in rounds), got 99999999999999999999",
    ),
    bad(
        ["run", R, "seeds=auto", "seeds_max=99999999999999999999"], 2, "seeds_max must be an integer >= 3 and <= 10000"
    ),
    bad(
        ["run", R, "act=relu", "seed=3"],
        2,
        "seed is set per run by the sweep, not on its command line: seeds=N trains seeds 0..N-1",
    ),
    bad(["estimate", R, "seed=3"], 2, "seed is set per run by the sweep"),
    bad(
        ["run", R, "snapshot_epochs=[0,99]", "epochs=1"],
        2,
        "snapshot_epochs=[0, 99] names epoch(s) 99 beyond "
        "epochs=1; each entry must be 0 (the init), an epoch from 1 "
        "to 1, or -1 (the last)",
    ),
    bad(["run", R, "snapshot_epochs=[0,16]", "epochs=4,15"], 2, "names epoch(s) 16 beyond epochs=15"),
    # ---- run: factor sweeps (every setting checked before the first) and seeds=auto
    bad(["run", R, "batch_size=64,0"], 2, "batch_size must be an integer >= 1, got 0 (setting batch_size=0)"),
    bad(
        ["run", R, "optim.name=sgd,adamz"],
        2,
        "optim.name must be one of sgd, adamw (did you mean adamw?), got 'adamz' (setting optim.name=adamz)",
    ),
    bad(
        ["run", R, "model.norm=null,group,"],
        2,
        "model.norm=null,group,: an empty value between commas; separate the "
        "values with single commas (write null for none)",
    ),
    bad(
        ["run", R, "factors={model.nrm: [null, group]}"],
        2,
        "factors: 'model.nrm' is not a config key a sweep can vary (did you mean model.norm",
    ),
    bad(["run", R, "seeds=1,2"], 2, "seeds cannot be swept (got seeds=1,2)"),
    bad(
        ["run", R, "seeds=auto", "act=gelu,silu"], 2, "seeds=auto compares each activation with report.baseline='relu'"
    ),
    bad(["run", R, "seeds=auto", "seeds_max=2"], 2, "seeds_max must be an integer >= 3, got 2"),
    bad(["run", R, "seeds=auto", "seeds_margin=-1"], 2, "seeds_margin must be null or a number > 0, got -1"),
    bad(
        ["run", R, "seeds_margin=1"],
        2,
        "seeds_margin applies only with seeds=auto (equivalence stops a round), got "
        "seeds=3; add seeds=auto or drop seeds_margin",
    ),
    # ---- run: a results tree this process cannot write (chmod: skipped as root, who may write anyway)
    bad(
        ["run", "results_dir={read_only}/empty"],
        2,
        "results_dir {read_only}/empty: {read_only}/empty is not writable "
        "(permission denied); make it writable (chmod -R u+w ",
    ),
    bad(
        ["run", "results_dir={read_only}/done"],
        2,
        "results_dir {read_only}/done: {read_only}/done/digits_vgg4 is not "
        "writable (permission denied); make it writable",
    ),
    bad(["run", "results_dir={read_only}/new/results"], 2, "{read_only}/new is not writable (permission denied)"),
    # ---- run, estimate: a file where the results tree would be
    bad(
        ["run", "results_dir={a_file}"],
        2,
        "results_dir {a_file}: {a_file} is a file, not a directory; pass results_dir=<a directory>",
    ),
    bad(
        ["run", "results_dir={a_file}/results"], 2, "results_dir {a_file}/results: {a_file} is a file, not a directory"
    ),
    bad(["estimate", "results_dir={a_file}"], 2, "results_dir {a_file}: {a_file} is a file, not a directory"),
    # ---- estimate: the run's checks, and it is a subcommand, not a key
    bad(["estimate", R, "epochs=abc"], 2, "epochs must be an integer >= 1, got 'abc'"),
    bad(["estimate", R, "act=relux"], 2, "unknown activation 'relux' (did you mean relu"),
    bad(
        ["estimate", R, "estimate=true"], 2, "unknown key 'estimate'; every key and its default: docs/configuration.md"
    ),
    bad(["estimate", R, "--foo"], 2, "expected key=value, got '--foo'"),
    # ---- report: the results dir, then each flag (argparse's own errors: see the_line)
    bad(["report"], 2, "the following arguments are required: RESULTS_DIR"),
    bad(["report", "{tmp}/nope"], 2, "results directory '{tmp}/nope' does not exist"),
    bad(
        ["report", "{tmp}"],
        2,
        "no finished run (summary.json) under '{tmp}'; expected <recipe>/<act>/seed_<k>/summary.json",
    ),
    bad(
        ["report", "{report_tree}", "--metric", "val_top7_best"],
        2,
        "unknown metric 'val_top7_best'; available: val_top1_best, val_top1_final, best_epoch, train_time_s, "
        "throughput_img_s, peak_mem_mb; or a curve metric: epochs_to_<X>",
    ),
    bad(
        ["report", "{report_tree}", "--metric", "epochs_to_120"],
        2,
        "--metric epochs_to_120: X in epochs_to_<X> is a percentage of the run's best, in (0, 100]; for an absolute "
        "threshold write epochs_to_120_abs",
    ),
    bad(
        ["report", "{report_tree}", "--metric", "val_loss_epochs_to_90"],
        2,
        "--metric val_loss_epochs_to_90: epochs_to needs a column where higher is better",
    ),
    bad(["report", "{report_tree}", "--baseline", "tanhh"], 2, "unknown baseline 'tanhh'; acts: gelu, relu"),
    bad(["report", "{report_tree}", "--format", "md,html"], 2, "unknown format html; choose from md, csv, tex"),
    bad(
        ["report", "{report_tree}", "--test", "anova"],
        2,
        "argument --test: invalid choice: 'anova' (choose from 'student', 'welch', 'paired')",
    ),
    bad(
        ["report", "{report_tree}", "--digits", "x"],
        2,
        "argument --digits: --digits takes an integer from 0 to 15, got 'x'",
    ),
    bad(["report", "{report_tree}", "--digits", "-3"], 2, "--digits takes an integer from 0 to 15, got '-3'"),
    bad(["report", "{report_tree}", "--seed", "-1"], 2, "--seed takes an integer >= 0, got '-1'"),
    bad(
        ["report", "{report_tree}", "--best-of", "model.nonexistent"],
        2,
        "--best-of 'model.nonexistent' is not a config key a sweep varies",
    ),
    bad(["report", "{report_tree}", "--best-of", "model.lsuv,seeds"], 2, "--best-of 'seeds' is not a config key"),
    bad(
        ["report", "{read_only}/done"],
        2,
        "argument RESULTS_DIR: {read_only}/done is not writable (permission "
        "denied); the report writes its tables and plots there",
    ),
    bad(
        ["report", "{report_tree}", "--margin", "0"],
        2,
        "--margin takes a positive number in the metric's units, got '0'",
    ),
    bad(
        ["report", "{report_tree}", "--effect", "abc"],
        2,
        "--effect takes a positive number in the metric's units, got 'abc'",
    ),
    bad(["report", "{report_tree}", "--alpha", "1.5"], 2, "--alpha takes a number in (0, 1), got '1.5'"),
    # ---- papers
    bad(["papers", "--paper", "9"], 2, "unknown --paper '9'; choose from 000, 001, 003, 004"),
    bad(["papers", "--paper", "3", "--table", "7"], 2, "unknown --table '7'; choose from Table "),
    bad(["papers", "--format", "html"], 2, "argument --format: invalid choice: 'html' (choose from 'md', 'csv')"),
    bad(["papers", "--test", "anova"], 2, "argument --test: invalid choice: 'anova' (choose from 'student', 'welch')"),
    # ---- bench activations | train | fit | warm
    bad(["bench", "nope"], 2, "unknown benchmark 'nope'; benchmarks: activations, train, fit"),
    bad(["bench", "trian"], 2, "unknown benchmark 'trian' (did you mean train?); benchmarks: activations, "),
    bad(["bench", "activations", "--families", "relux", OUT], 2, "unknown family 'relux'; known: rational A, "),
    bad(
        ["bench", "activations", "--shape", "2,x", OUT],
        2,
        "argument --shape: takes comma-separated integers >= 1 (NCHW), got '2,x'",
    ),
    bad(["bench", "activations", "--dtype", "int8", OUT], 2, "argument --dtype: invalid choice: 'int8'"),
    bad(["bench", "activations", "--repeats", "0", OUT], 2, "argument --repeats: must be an integer >= 1, got '0'"),
    bad(["bench", "sweep", "--k", "0", OUT], 2, "argument --k: must be comma-separated integers >= 1"),
    bad(
        ["bench", "sweep", "--project", "20", OUT], 2, "argument --project: must be SEEDSxEPOCHS, e.g. 20x60, got '20'"
    ),
    bad(["bench", "sweep", "trainer.mps=true", OUT], 2, "visionbench bench sweep: trainer.mps=true needs CUDA"),
    bad(
        ["bench", "activations", "--event-rounds", "0", OUT],
        2,
        "argument --event-rounds: must be an integer >= 1, got '0'",
    ),
    bad(["bench", "activations", "--device", "nope", OUT], 2, "argument --device: not a torch device, got 'nope'"),
    bad(["bench", "train", "recipe=nope", "act=relu", OUT], 2, "unknown recipe 'nope'; `visionbench list` lists"),
    bad(["bench", "train", "act=relu,gelu", OUT], 2, "give one activation (act=NAME), got act=relu,gelu"),
    bad(["bench", "train", "act=relu", "epochs=abc", OUT], 2, "epochs must be an integer >= 1, got 'abc'"),
    bad(["bench", "train", "act=relu", "--steps", "0", OUT], 2, "argument --steps: must be an integer >= 1, got '0'"),
    bad(["bench", "fit", "--families", "relu", OUT], 2, "unknown learnable activation(s) relu; known: acon_c, "),
    bad(["bench", "fit", "--repeats", "0", OUT], 2, "--repeats must be >= 1, got 0"),
    bad(
        ["bench", "activations", "--deterministic", "yes", OUT],
        2,
        "argument --deterministic: must be one of on, off, both, got 'yes'",
    ),
    bad(["bench", "train", "act=relu", "--deterministic", "1", OUT], 2, "argument --deterministic: must be one of "),
    bad(
        ["bench", "warm", "--coefficients", "shared,none", OUT],
        2,
        "argument --coefficients: takes comma-separated kinds of shared, per-channel, got 'shared,none'",
    ),
    bad(["bench", "warm", "--jobs", "0", OUT], 2, "argument --jobs: must be an integer >= 1, got '0'"),
    # ---- bench data (and every bench's --device and --out: refused before anything is built or timed)
    bad(
        ["bench", "data", "--device", "cuda:99", OUT],
        2,
        "argument --device: cuda:99 is not available on this machine (",
    ),
    bad(["bench", "data", "--out", "{a_file}"], 2, "argument --out: {a_file}: {a_file} is a file, not a directory"),
    bad(["bench", "activations", "--out", "{a_file}/sub"], 2, "argument --out: {a_file}/sub: {a_file} is a file"),
    bad(["bench", "train", "act=relu", "--out", "{a_file}"], 2, "argument --out: {a_file}: {a_file} is a file"),
    bad(
        ["bench", "data", "recipe=imagenet_resnet50", "data.root={tmp}/datasets", OUT],
        2,
        "ImageNet not found at {tmp}/datasets/imagenet; data root: {tmp}/datasets (from data.root); expected layout: ",
    ),
    # ---- plot
    bad(["plot", "nope"], 2, "argument what: invalid choice: 'nope' (choose from 'boundaries')"),
    bad(
        ["plot", "boundaries", "--acts", "relu,nope", "--out", "{tmp}/b.png"],
        2,
        "unknown activation 'nope'; `visionbench list` lists",
    ),
    bad(
        ["plot", "boundaries", "--datasets", "xor", "--out", "{tmp}/b.png"],
        2,
        "unknown toy dataset 'xor'; choose from moons, circles, spirals, classification",
    ),
]


# ---- what a placeholder of a row stands for (made in the test's tmp_path before the command) ------------------
def _report_tree(tmp: Path) -> Path:
    """Two activations, two completed seeds each, with 3-epoch curves (metrics.csv) for the curve metrics."""
    return write_recipe(tmp / "tree", "toy", {"relu": [90.0, 90.5], "gelu": [91.0, 91.2]}, epochs=3)


def _not_weights(tmp: Path) -> Path:
    path = tmp / "weights.pth"
    path.write_text("these are not weights\n")
    return path


def _other_arch(tmp: Path) -> Path:
    """The weights of a network that is not the recipe's (VGG4): a fine-tuning checkpoint of another architecture."""
    import torch

    path = tmp / "other.pth"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Linear(4, 10)).state_dict(), path)
    return path


def _cifar_without(name: str):
    def make(tmp: Path) -> Path:
        (tmp / name).mkdir()
        root = write_cifar10(tmp / name)
        (root / "cifar-10-batches-py" / name.split("without_", 1)[1]).unlink()
        return root

    return make


def _read_only(tmp: Path) -> Path:
    """`empty/`: an empty results dir; `done/`: one with a finished digits_vgg4 run; `new/`: a parent in which
    results_dir would be created. All chmod'ed read-only (the test is skipped as root: chmod restricts no root)."""
    if os.geteuid() == 0:
        pytest.skip("running as root: a chmod'ed directory does not stop root from writing")
    base = tmp / "ro"
    run = base / "done" / "digits_vgg4" / "relu" / "seed_0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "completed"}\n')
    (base / "empty").mkdir()
    (base / "new").mkdir()
    for d in sorted((p for p in base.rglob("*") if p.is_dir()), reverse=True):
        d.chmod(0o555)
    return base


def _a_file(tmp: Path) -> Path:
    path = tmp / "afile"
    path.write_text("not a directory\n")
    return path


def _fmnist_empty(split: str):
    """A Fashion-MNIST root whose `split` files ("train" or "t10k") hold 0 images (valid IDX headers)."""

    def make(tmp: Path) -> Path:
        import numpy as np

        from .fixtures_fashion_mnist import idx_bytes, write_fmnist

        folder = write_fmnist(tmp / f"fm_{split}" / "fashion-mnist")
        (folder / f"{split}-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((0, 28, 28), np.uint8), 2051))
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros((0,), np.uint8), 2049))
        return folder.parent

    return make


SETUP = {
    "{a_file}": _a_file,
    "{fmnist_empty_test}": _fmnist_empty("t10k"),
    "{fmnist_empty_train}": _fmnist_empty("train"),
    "{report_tree}": _report_tree,
    "{not_weights}": _not_weights,
    "{other_arch}": _other_arch,
    "{cifar_without_data_batch_4}": _cifar_without("without_data_batch_4"),
    "{cifar_without_test_batch}": _cifar_without("without_test_batch"),
    "{read_only}": _read_only,
}


def _fill(texts: list[str], tmp: Path) -> list[str]:
    """`texts` with the placeholders replaced, making what they name."""
    made = {"{tmp}": str(tmp)}
    for key, make in SETUP.items():
        if any(key in t for t in texts):
            made[key] = str(make(tmp))
    out = []
    for t in texts:
        for key, value in made.items():
            t = t.replace(key, value)
        out.append(t)
    return out


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time: what "nothing written" compares."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def command(tmp_path, monkeypatch, capsys):
    """Run a row in tmp_path (also the working directory); returns (exit code, stderr, the row's texts filled).
    Asserts nothing was written and nothing trained (a check that let a bad value through would train the
    default sweep: it fails here at once instead)."""
    from visionbench.sweep import sweep

    def trained(*args, **kwargs):
        raise AssertionError("a bad input reached training")

    monkeypatch.setattr(sweep, "execute_jobs", trained)
    monkeypatch.chdir(tmp_path)

    def run(argv: list[str], *texts: str):
        argv_texts = _fill([*argv, *texts], tmp_path)
        before = _tree(tmp_path)
        capsys.readouterr()
        code = main(argv_texts[: len(argv)])
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        assert _tree(tmp_path) == before, "a bad input wrote something"
        return code, err, argv_texts[len(argv) :]

    yield run
    for d in tmp_path.rglob("*"):  # what {read_only} made read-only, writable again for pytest's clean-up
        if d.is_dir() and not d.is_symlink():
            d.chmod(0o755)


def the_line(err: str) -> str:
    """stderr's one line. An argparse usage error (a flag's type or choices, a missing argument) prints
    argparse's usage synopsis first: its lines (the first begins `usage:`, the rest are indented) are
    not the message."""
    lines = [line for line in err.splitlines() if line.strip()]
    if lines and lines[0].startswith("usage: visionbench "):
        lines = [line for line in lines[1:] if not line.startswith(" ")]
    assert len(lines) == 1, f"not one line:\n{err}"
    return lines[0]


@pytest.mark.parametrize("argv, code, text", BAD_INPUTS)
def test_a_bad_input_fails_in_one_line_and_writes_nothing(command, argv, code, text):
    exit_code, err, (text,) = command(argv, text)
    assert exit_code == code, err
    line = the_line(err)
    assert line.startswith(f"visionbench {argv[0]}") and text in line, line


# ---- inputs once refused (or misread) that are good: each is read as the single value would be -----------------
GOOD_INPUTS = [
    # YAML 1.1 reads 1e-3 as a string: a factor's values and a variant's options are read as Hydra reads a value
    (["optim.lr=1e-3,1e-2"], {"optim.lr": [0.001, 0.01]}),
    (["optim.weight_decay=0,5e-4"], {"optim.weight_decay": [0, 0.0005]}),
    (["optim.lr=0.02,1.0e8"], {"optim.lr": [0.02, 1e8]}),
    (["optim.lr=1e-3"], {"optim.lr": 0.001}),
    (["act=relu,slaf[eps=1e-3]"], {"act_options:slaf[eps=1e-3]": {"eps": 0.001}}),
    # paths beyond ASCII: Hydra's grammar cannot lex them unquoted, so they are quoted for it
    (
        ["results_dir={tmp}/ü日本", "data.root={tmp}/données"],
        {"results_dir": "{tmp}/ü日本", "data.root": "{tmp}/données"},
    ),
]


@pytest.mark.parametrize("argv, expected", GOOD_INPUTS, ids=[" ".join(a) for a, _ in GOOD_INPUTS])
def test_a_good_input_once_refused_is_read_as_written(argv, expected, tmp_path):
    from omegaconf import OmegaConf

    from visionbench.config import act_options, sweep_settings
    from visionbench.sweep.preflight import load_config

    cfg = load_config([a.replace("{tmp}", str(tmp_path)) for a in argv])
    settings = sweep_settings(cfg)
    for key, value in expected.items():
        value = value.replace("{tmp}", str(tmp_path)) if isinstance(value, str) else value
        if key.startswith("act_options:"):
            assert act_options(cfg, key.split(":", 1)[1])[1] == value
        elif isinstance(value, list):  # a factor: one setting per value, in order
            assert [s[key] for s in settings] == value
        else:
            assert OmegaConf.select(cfg, key) == value
    assert not list(tmp_path.iterdir())  # checked, nothing written


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["run", "act=rleu"],
            "visionbench run: unknown activation 'rleu' (did you mean relu or relu6?); `visionbench list`",
        ),
        (
            ["run", "recipe=digits_vgg"],
            "visionbench run: unknown recipe 'digits_vgg' (did you mean digits_vgg8 or digits_vgg4?)",
        ),
        (
            ["run", "optim.lrr=0.1"],
            "visionbench run: unknown key 'optim.lrr' (did you mean optim.lr or optim or optim.eps?)",
        ),
    ],
)
def test_a_typo_gets_one_line_with_did_you_mean_and_where_the_list_lives(argv, line, capsys):
    from visionbench.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1 and len(err) < 400  # no dump of every name

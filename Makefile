# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: run test test-slow rates lint format bench kernel-card gpu-window gpu-carry reference install lock clean results

# every package at the version requirements.lock names (the CPU reference environment), then visionbench itself,
# editable and without dependencies: they all came from the lock, the extras' too (dev, slurm, mlflow, wandb).
# scripts/install.sh: with uv when it can be had (INSTALLER=auto), else pip; INSTALLER=pip or uv picks one.
# Both paths end in the same environment (tests/test_install.py, scripts/compare_installs.sh).
INSTALLER ?= auto
$(STAMP): pyproject.toml requirements.lock
	@rm -f $(STAMP)
	@PY=$(PY) VENV=$(VENV) INSTALLER=$(INSTALLER) scripts/install.sh
	@touch $(STAMP)

install: $(STAMP)

# requirements.lock, resolved afresh in a temporary venv: torch and torchvision pinned to the builds this project is
# tested with, the rest from pyproject.toml's ranges (which stay ranges: users install visionbench into their own
# GPU environments); `pip freeze --all` keeps setuptools (torch requires it); pip and the editable visionbench are
# left out.
# Run it after changing a requirement, and commit the lock (docs/layout.md#development).
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
EXTRAS     := dev,slurm,mlflow,wandb
lock:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(PY) -m venv $$tmp/venv; \
	$$tmp/venv/bin/pip install -q $(TORCH_PINS); \
	$$tmp/venv/bin/pip install -q -e '.[$(EXTRAS)]'; \
	{ echo "# The CPU reference environment: every package, transitive ones too, at its exact version."; \
	  echo "# Made by \`make lock\` with $$($$tmp/venv/bin/python -c 'import platform as p; print("Python", p.python_version(), "on", p.system(), p.machine())'): in a fresh venv,"; \
	  echo "# pip install $(TORCH_PINS), then pip install -e '.[$(EXTRAS)]'"; \
	  echo "# (pyproject.toml's ranges), then pip freeze --all --exclude-editable, without pip and visionbench."; \
	  echo "# \`make install\` installs exactly these. Do not edit by hand: refresh it with \`make lock\`."; \
	  $$tmp/venv/bin/pip freeze --all --exclude-editable | grep -viE '^pip=='; } > requirements.lock.tmp; \
	mv requirements.lock.tmp requirements.lock; echo "wrote requirements.lock ($$(grep -vc '^#' requirements.lock) packages)"

run: $(STAMP)  ## the main job on the embedded default (digits, VGG4)
	$(BIN)/visionbench run

# two pytest-xdist workers (one torch thread each: tests/conftest.py) on a 2-core machine; docs/layout.md#development
test: $(STAMP)  ## the default test suite (no slow tests), under 5 minutes on 2 cores
	$(BIN)/python -m pytest -q -n 2

# the slow tests on two workers, then those marked `serial` in one process (they send signals to subprocesses and
# wait on their epochs, or run stages under time caps: a busy neighbour would move their timing); .ci/run runs both
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "slow and not serial"
	$(BIN)/python -m pytest -q -m "slow and serial"

# the documented error-rate tables at their documented scale (1,000-5,000 simulated designs a cell: ~12 minutes in
# one process, which prints their rows); each has a smaller sibling in `make test` holding the same bound (pyproject's `rates`)
rates: $(STAMP)  ## regenerate the error-rate figures quoted in docs/ (prints their rows)
	$(BIN)/python -m pytest -q -s -n 0 -m rates

# ruff, configured in pyproject.toml ([tool.ruff]): the formatter's check, then the linter; `make format` rewrites
lint: $(STAMP)  ## formatting and lint, as CI checks them
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: $(STAMP)  ## format every file and apply the linter's safe fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)  ## activation speed and fit time (docs/bench.md)
	$(BIN)/visionbench bench activations
	$(BIN)/visionbench bench fit

# The Triton kernels' cost card, no GPU needed (docs/bench.md#the-cost-card-what-the-compiled-kernels-predict-no-gpu-needed):
# every family compiled for sm_90 and sm_80 by the pinned Triton and by Triton $(TRITON_OTHER) (torch 2.11's, what the
# lent GPU machine runs), fetched from PyPI into .cache/ first; into results/bench/kernels_sm90.md
TRITON_OTHER ?= 3.6.0
kernel-card: $(STAMP)
	@test -f .cache/triton-$(TRITON_OTHER)/triton/__init__.py || \
	  $(BIN)/python -m pip install -q --no-deps --target .cache/triton-$(TRITON_OTHER) triton==$(TRITON_OTHER)
	$(BIN)/visionbench bench kernels --also-triton .cache/triton-$(TRITON_OTHER)

# One lent GPU's window (docs/bench.md#the-gpu-window): every GPU benchmark in at most 6 minutes, kernel compilation
# included, each stage in its own subprocess under the time it is given, each report into results/bench/ as its rows
# are measured, with gpu_window.md listing them. No venv and no install: a lent GPU has no registry (python3 there
# holds torch; visionbench runs from the checkout). `make gpu-window DEVICE=cpu` is the dry run (tiny sizes, into
# runs/gpu_window_dry/); `python3 scripts/gpu_window.py --plan` prints the stages and their times.
DEVICE    ?= cuda
WINDOW_PY := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
gpu-window:
	$(WINDOW_PY) scripts/gpu_window.py --device $(DEVICE) $(if $(wildcard .gpu-site),--site .gpu-site)

# what the window's stages need beyond the lent GPUs' image (Hydra for the recipes; pytest, its requirements and xdist
# at the locked versions: pure Python; scripts/pack_site.py WINDOW), copied from this venv into .gpu-site/
# (git-ignored; the device tool carries it: docs/bench.md#the-gpu-window)
gpu-carry: $(STAMP)
	rm -rf .gpu-site
	$(BIN)/python scripts/pack_site.py .gpu-site

reference: $(STAMP)  ## the bench's reference implementations (rational-activations pins torch 1.7.1: no deps)
	$(BIN)/pip install -q -e '.[reference]'
	$(BIN)/pip install -q --no-deps rational-activations==0.2.0

# every committed table, per_example file and figure, regenerated from its committed record (results/regenerate.txt;
# docs/reproducing.md); tests/test_committed_results.py checks the tables byte for byte
results: $(STAMP)
	grep -v '^#' results/regenerate.txt | while read -r record flags; do $(BIN)/visionbench report $$record $$flags > /dev/null || exit 1; done

# a real browser for the test of `visionbench report --html`'s page (tests/test_report_html.py loads it headless;
# skipped without one): Debian's chromium, from the machine's package lists (as root; already there: nothing to do)
.PHONY: browser
browser:
	command -v chromium || { apt-get update -q && apt-get install -y -q chromium; }

clean:
	rm -rf $(VENV) .venv-uv build *.egg-info

# Fashion-MNIST (docs/data.md): Debian's dataset-fashion-mnist package, unpacked without root (`dpkg -x`) into
# $(DATA)/usr/share/datasets/fashion-mnist/ (the four IDX .gz files), where the loader finds them. `apt-get download`
# needs no root; where this machine's package lists lack the package, a private `apt-get update` into a
# temporary folder fetches them. Checked with the loader afterwards (60,000 + 10,000 images).
DATA       ?= data
FMNIST_DIR := $(DATA)/usr/share/datasets/fashion-mnist
FMNIST_PKG := dataset-fashion-mnist
.PHONY: data-fashion-mnist
data-fashion-mnist:
	@set -e; if [ -f $(FMNIST_DIR)/t10k-labels-idx1-ubyte.gz ]; then echo "already there: $(FMNIST_DIR)"; else \
	tmp=$$(mktemp -d); apt="-q -o APT::Sandbox::User=$$(id -un)"; \
	( cd $$tmp && apt-get $$apt download $(FMNIST_PKG) ) || { \
	  echo "apt-get download failed: fetching package lists into $$tmp (no root needed)"; \
	  mkdir -p $$tmp/lists/partial $$tmp/cache/archives/partial; \
	  apt="$$apt -o Dir::State::Lists=$$tmp/lists -o Dir::Cache=$$tmp/cache"; \
	  apt-get $$apt update; ( cd $$tmp && apt-get $$apt download $(FMNIST_PKG) ); }; \
	mkdir -p $(DATA); dpkg -x $$tmp/$(FMNIST_PKG)_*.deb $(DATA); rm -rf $$tmp; fi; \
	ls -l $(FMNIST_DIR)
	@if [ -x $(BIN)/python ]; then $(BIN)/python -c "from visionbench.data.fashion_mnist import main; raise SystemExit(main(['$(DATA)']))"; \
	else echo "not checked: no $(BIN)/python (make install)"; fi

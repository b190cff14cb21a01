# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: run test test-slow bench bench-gpu reference install clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	# torch first, pinned to the CPU-usable builds this project is tested with
	$(BIN)/pip install -q torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)  ## the main job on the embedded default (digits, VGG4)
	$(BIN)/visionbench run

test: $(STAMP)  ## the default test suite (no slow tests)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/visionbench bench activations

# The first GPU's numbers (issue 14), into results/bench/: the activation benchmark and the training-step
# benchmark of VGG8/rational and ConvNeXt-T/hermite. `make bench-gpu DEVICE=cpu` tries it on a CPU.
DEVICE  ?= cuda
bench-gpu: $(STAMP)
	$(BIN)/visionbench bench activations --device $(DEVICE) --name activations_$(DEVICE)
	$(BIN)/visionbench bench train recipe=cifar10_vgg8 act=rational --device $(DEVICE) --name train_vgg8_rational_$(DEVICE)
	$(BIN)/visionbench bench train recipe=cifar10_convnext_t act=hermite --device $(DEVICE) --name train_convnext_t_hermite_$(DEVICE)

reference: $(STAMP)  ## the bench's reference implementations (rational-activations pins torch 1.7.1: no deps)
	$(BIN)/pip install -q -e '.[reference]'
	$(BIN)/pip install -q --no-deps rational-activations==0.2.0

clean:
	rm -rf $(VENV) build *.egg-info

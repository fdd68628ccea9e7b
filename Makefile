# The two commands of the README, and a few more. Each target installs missing Debian
# packages, configures and builds first.
BUILD    ?= build
JOBS     ?= $(shell nproc)
NP       ?= 2
WERROR   ?= OFF
CMAKE_FLAGS ?=

# Open MPI refuses to run as root unless told; tell it only when we are root.
ifeq ($(shell id -u),0)
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
endif
MPIRUN := mpirun --oversubscribe -np $(NP)

.PHONY: deps configure build trainer train test bench bench-cluster-collectives bench-cluster-train sanitize sanitize-asan sanitize-tsan fuzz clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DMPITRAIN_WERROR=$(WERROR) $(CMAKE_FLAGS) >/dev/null

# Everything: the library, the tools, the examples and every test.
build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Only what training needs: the trainer and the library it links, no test target
# (tests/packaging/make_train_test.py checks the dry run of `make train`).
trainer: configure
	@cmake --build $(BUILD) -j $(JOBS) --target trainer

# The default run: the MLP 784-256-256-10 on Fashion-MNIST, 5 epochs, 2 ranks. Each `make train`
# trains afresh: project.overwrite removes the previous run's metrics and checkpoints (a fresh run
# into a used project.dir is otherwise refused; resume it with --set project.resume=latest).
train: trainer
	$(MPIRUN) $(BUILD)/apps/trainer --config configs/fashion_mnist_mlp.yaml --set project.overwrite=true

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(MPIRUN) $(BUILD)/benchmarks/collective_bench --algo all --min-bytes 1K --max-bytes 256M --json $(BUILD)/collective_bench.json

# collective_bench and train_bench across simulated nodes (scripts/cluster_bench.sh, as root:
# network namespaces): CLUSTER_NODES nodes x CLUSTER_RANKS ranks, links shaped to CLUSTER_RATE,
# then the bytes each link carried and its utilisation. CLUSTER_COLLECTIVE_ARGS and
# CLUSTER_TRAIN_ARGS are the benchmarks' arguments. train_bench gets one BLAS thread per rank:
# the simulated nodes share this machine's cores, and one thread each gives the 1-rank baseline
# and each node one core.
CLUSTER_NODES ?= 2
CLUSTER_RANKS ?= 1
CLUSTER_RATE  ?= 2gbit
CLUSTER_COLLECTIVE_ARGS ?= --dtype f32,bf16 --algo default --min-bytes 1M --max-bytes 64M
CLUSTER_TRAIN_ARGS ?= --model large --overlap both --grad-comm-dtype f32,bf16 --blas-threads 1
CLUSTER_BENCH := bash scripts/cluster_bench.sh --build $(BUILD) --nodes $(CLUSTER_NODES) \
  --ranks-per-node $(CLUSTER_RANKS) --rate $(CLUSTER_RATE)
bench-cluster-collectives: build
	$(CLUSTER_BENCH) collective_bench $(CLUSTER_COLLECTIVE_ARGS)

bench-cluster-train: build
	$(CLUSTER_BENCH) train_bench $(CLUSTER_TRAIN_ARGS)

# ASan + UBSan build of the core library (no optional component: it also proves the core
# builds and passes its tests alone) and its tests (build-asan), then its tests under it;
# TSan build (build-tsan) of the communication
# thread's tests. The sanitizers' options and suppressions come from the tests' CTest
# environment (cmake/MpitrainTesting.cmake).
# Every test of the build but the slow ones that add nothing under a sanitizer: packaging
# (an install), benchmarks and examples (covered by the library's tests), the README's
# commands, the structure checks, the >2^31-element tests (tens of GB of shadow memory), and
# the multinode label (the same code paths as the plain tests' explicit mpi and ring runs,
# behind network namespaces; minutes that CI's 45 do not have).
SANITIZE_EXCLUDE_LABELS ?= packaging|structure|benchmarks|examples|readme|multinode
SANITIZE_EXCLUDE_TESTS ?= large_count
TSAN_TARGETS := collectives_comm_stream_test engine_gradient_sync_test engine_test
TSAN_TESTS := ^(collectives_comm_stream_test|engine_gradient_sync_test|engine_test)\.np
# -g1 (line tables: enough for the reports' stacks) compiles much faster than -g, and -O1
# (the sanitizers' advice) than -O2: a GoogleTest file under ASan+UBSan takes about two thirds
# of the time (tests/engine/engine_test.cpp: 37 s, 57 s at -O2), and the tests run about as
# fast (the CI selection: 376 s, 338 s at -O2).
SANITIZE_FLAGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DMPITRAIN_BUILD_BENCHMARKS=OFF \
  -DMPITRAIN_TORCH=OFF -DMPITRAIN_WERROR=$(WERROR) $(CMAKE_FLAGS)
sanitize: sanitize-asan sanitize-tsan

sanitize-asan: deps
	@cmake -S . -B build-asan -DMPITRAIN_SANITIZE=address,undefined $(SANITIZE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -LE '$(SANITIZE_EXCLUDE_LABELS)' \
	  -E '$(SANITIZE_EXCLUDE_TESTS)'

sanitize-tsan: deps
	@cmake -S . -B build-tsan -DMPITRAIN_SANITIZE=thread $(SANITIZE_FLAGS) >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TARGETS)
	cd build-tsan && ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

# libFuzzer harnesses (clang) of the config loader, the IDX reader, the manifest parser and
# the safetensors reader, each run for FUZZ_SECONDS over its committed seed corpus (new inputs
# go to build-fuzz/corpus, not into the source tree).
FUZZ_SECONDS ?= 60
FUZZERS := train_config_fuzz idx_dataset_fuzz manifest_fuzz safetensors_fuzz
fuzz: deps
	@cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@for f in $(FUZZERS); do \
	  name=$${f%_fuzz}; mkdir -p build-fuzz/corpus/$$name; \
	  echo "fuzz: $$f for $(FUZZ_SECONDS) s"; \
	  build-fuzz/$$f -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -print_final_stats=1 \
	    build-fuzz/corpus/$$name tests/fuzz/corpus/$$name 2>build-fuzz/$$f.log \
	    || { tail -60 build-fuzz/$$f.log; exit 1; }; \
	  grep -E '^(stat::number_of_executed_units|Done)' build-fuzz/$$f.log; \
	done

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz

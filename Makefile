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

.PHONY: deps configure build trainer train test bench clean

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

# The default run: the MLP 784-256-256-10 on Fashion-MNIST, 5 epochs, 2 ranks.
train: trainer
	$(MPIRUN) $(BUILD)/apps/trainer --config configs/fashion_mnist_mlp.yaml

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(MPIRUN) $(BUILD)/benchmarks/collective_bench --algo all --min-bytes 1K --max-bytes 256M --json $(BUILD)/collective_bench.json

clean:
	rm -rf $(BUILD)

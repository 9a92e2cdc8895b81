# The two set-up commands of the README:
#   make run    builds hyperstream and runs the main job on the built-in model
#   make test   builds hyperstream and runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build run test clean

all: build

setup:
	@./scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@./scripts/run_demo.sh $(BUILD)/src/hyperstream

test: build
	@cd $(BUILD) && ctest -j $(JOBS) --output-on-failure

clean:
	rm -rf $(BUILD)

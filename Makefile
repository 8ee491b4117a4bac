# The README's commands. Each target is a thin wrapper; run `make help`.
GO ?= go

.PHONY: help demo kafka sqs test faults bench lint build

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-6s %s\n", $$1, $$2}'

# The broker URL reaches the program through the environment, and the
# command is echoed with $$BROKER, so that a password in it is never printed.
demo: ## run the checkout demo on the in-process backend (BROKER=url to change)
	@echo '$(GO) run ./examples/checkout$(if $(BROKER), -broker "$$BROKER")'
	@BROKER='$(BROKER)' $(GO) run ./examples/checkout $(if $(BROKER),-broker "$$BROKER")

kafka: ## run Kafka (kfake, in memory) on 127.0.0.1:9092 in the foreground, no Docker needed (KAFKA_PORT=n to change)
	@scripts/dev.sh kafka

sqs: ## run SQS/SNS (goaws v0.5.4, in memory) on port 4100 in the foreground, no Docker needed (SQS_PORT=n to change)
	@scripts/dev.sh sqs

test: ## run all tests, starting Redis/RabbitMQ/PostgreSQL/NATS if needed (what CI runs; PKGS=./x/... to narrow)
	scripts/test.sh $(PKGS)

faults: ## fault scenarios (restarts, SIGKILL, poison, backlog, network faults) + fuzzing; writes docs/reliability.md (~23 min)
	faults/run.sh

bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint: ## gofmt check and go vet
	@out=$$(gofmt -l . ) && if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

build: ## compile every package, and bin/relay when cmd/relay exists
	$(GO) build ./...
	@if ls cmd/relay/*.go >/dev/null 2>&1; then echo "$(GO) build -o bin/relay ./cmd/relay"; $(GO) build -o bin/relay ./cmd/relay; fi

package main

// Every adapter of the module, so that the binary speaks every URL scheme.
import (
	_ "github.com/go-relay/relay/adapters/amqp"        // amqp://, amqps://
	_ "github.com/go-relay/relay/adapters/gcppubsub"   // gcppubsub://
	_ "github.com/go-relay/relay/adapters/kafka"       // kafka://
	_ "github.com/go-relay/relay/adapters/memory"      // mem://
	_ "github.com/go-relay/relay/adapters/mqtt"        // mqtt://, mqtts://
	_ "github.com/go-relay/relay/adapters/nats"        // nats://
	_ "github.com/go-relay/relay/adapters/postgres"    // postgres://, postgresql://
	_ "github.com/go-relay/relay/adapters/redisstream" // redis://, rediss://
	_ "github.com/go-relay/relay/adapters/sqlite"      // sqlite://
	_ "github.com/go-relay/relay/adapters/sqs"         // sqs://, sns://
)

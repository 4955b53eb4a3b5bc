// Package e2e holds the end-to-end tests and benchmarks of ckfrelay: real
// relays and a real global indexer over embedded nats-server instances,
// fed by the Mooncake trace through the replayer.
package e2e

// Package consumer is the global CKF consumer of one indexer domain (spec
// §8, §9, §11): the manifest of DC lanes, the transposed 16-lane table, the
// per-lane ingestors that apply snapshots and deltas, the ingestion pool,
// and the allocation-free prefix query.
//
// # Contract
//
//   - A query (Indexer.FindPrefixMatches and friends) never blocks, never
//     allocates, and reads only lanes whose ready bit it saw set when it
//     started; a lane leaves the ready set before any state it could answer
//     from is changed or released.
//   - A lane is applied by exactly one worker goroutine (Pool), in admission
//     order: snapshots, deltas and drain markers of one lane never reorder,
//     while other lanes proceed in parallel. The full concurrency contract
//     of the pool is written at the top of pool.go.
//   - Every failure is typed (PoolBuildErrorKind, IngestionErrorKind,
//     FaultKind, mirroring the seed's enums) and carries its recovery
//     disposition; the pool fails closed: an error that leaves a lane's state
//     in doubt retires that lane.
//   - Nothing here imports NATS or the producer; the transport lives in
//     pkg/follow.
package consumer

// Package lanerules holds the rules an index follows its lanes by (how long
// an admitted delta may wait to be applied, when a lane is stale and what a
// stale lane does, the CKF format it accepts, the ingestion pool's size, the
// snapshot read deadline) with the defaults of the global-indexer binary.
// The binary's flags and pkg/client's Mirror both take their defaults from
// here, so an in-process mirror keeps and drops lanes exactly as the
// indexer does.
package lanerules

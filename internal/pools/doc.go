// Package pools runs many pools (one per domain, i.e. per model) of one DC
// in one relay process. Each pool is an unchanged internal/relay.Relay: its
// own input consumer on kvevents.<domain>.<dc>.>, its own lease and epoch,
// lane, checkpoints, snapshot requests and limits, so a pool that faults,
// is refused or is over budget never stalls another, and one process may
// hold the lease of some pools while it stands by for others.
//
// Pools are declared in a file (File, YAML) and, where its allow patterns
// admit the domain, appear on their first worker event: the manager
// watches kvevents.*.<dc>.> and the input stream's subjects for domains it
// does not run yet. Every pool's series carry the label domain. The pools
// are the units of a unithost.Host, which owns their life cycle, bound,
// refusals and metrics and states the concurrency contract.
//
// With Config.KvRelay set every pool also publishes over dynamo.kvrelay.v1:
// OnPool's callbacks hand each pool's Publication to one server, whose
// catalog then lists every pool this process holds the lease of.
package pools

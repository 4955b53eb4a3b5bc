// Package domains is the host of the domains (models) one process follows,
// global-indexer's and pkg/client's Mirror's alike, one domain or many: a
// registry maps each domain name to its own follow.Service, so each domain
// has its own transposed table (sized by its own format), its own lanes,
// lane map watch, faults, rebuilds and readiness, and one domain's trouble
// never reaches another's answers.
//
// Domains come from the configuration (Config.Domains) and, with
// Config.Discover, from every lane map in the lease bucket: a domain is
// created when the first relay registers a DC in it. Two bounds hold: the
// number of domains (Config.MaxDomains) and the sum of their tables
// (Config.MaxTableBytes). A domain over either is refused with a
// *unithost.Error (unithost.ErrTooMany, unithost.ErrOverBudget), logged and
// counted in MetricRefused; nothing already served is dropped. The domains
// are the units of a unithost.Host, which owns their life cycle and states
// the concurrency contract.
//
// With Config.KvRelay, models followed over dynamo.kvrelay.v1 come as
// domains too: each source's catalog is watched (client.WatchModels) and
// each listed model (or each chosen one) is added, under the same bounds
// and Allow, as the domain ModelDomain names, whose service follows that
// model from every source at the model's block size (kvrelay.go).
//
// The Registry answers as the query API's backend does: a query names its
// domain with "model" (or "domain"); one that names none goes to the
// default domain (the first configured one, or the only one). Whatever
// Config.Base.Attach adds is added to every domain (global-indexer's NATS
// endpoint ckfq.<domain>.match, internal/indexer). Every series of a
// domain's service carries the label domain.
package domains

// Package indexer is what only the global-indexer binary adds to the lane
// engine of pkg/follow (and its host of many domains, pkg/domains): each
// domain's NATS micro service, ckfq.<domain>.match and ckfq.<domain>.route
// (Endpoint, plugged into every domain's service through
// follow.Config.Attach), and the API metrics the HTTP handlers and that
// endpoint share. The lane rules, the table and the queries are
// pkg/follow's, so pkg/client's Mirror runs the same code.
//
// Concurrency contract: an Endpoint's handlers run on nats.go's
// subscription goroutines and only call the follow.Service's query
// methods, which are safe for concurrent use; Start and Stop are called
// once each, by the service's Run.
package indexer

package indexer

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
)

// Service is the global indexer of one domain: the follow.Service with
// its NATS endpoint attached. It implements queryapi.Backend.
type Service struct {
	*follow.Service
	ep *Endpoint
}

// New builds the service of cfg.Domain with its NATS endpoint (cfg.Attach
// is replaced). It does not start following the lanes: call Run.
func New(nc *nats.Conn, js jetstream.JetStream, cfg follow.Config) (*Service, error) {
	var ep *Endpoint
	cfg.Attach = func(s *follow.Service, reg prometheus.Registerer) (follow.Attachment, error) {
		var err error
		ep, err = newEndpoint(s, reg)
		return ep, err
	}
	s, err := follow.New(nc, js, cfg)
	if err != nil {
		return nil, err // a *follow.Error, which names the indexer already
	}
	return &Service{Service: s, ep: ep}, nil
}

// APIMetrics returns the API metrics to pass to queryapi.Handler, so HTTP and
// the NATS endpoint count into the same series.
func (s *Service) APIMetrics() *queryapi.Metrics { return s.ep.apiM }

// The registry of many domains answers the query API as one service does.
var (
	_ queryapi.Backend       = (*Service)(nil)
	_ queryapi.DomainBackend = (*domains.Registry)(nil)
	_ queryapi.RouteBackend  = (*domains.Registry)(nil)
)

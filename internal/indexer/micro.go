package indexer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
)

// Micro service identity.
const (
	// MicroServiceName is the NATS micro service name.
	MicroServiceName = "ckf-indexer"
	// MicroServiceVersion is its semantic version.
	MicroServiceVersion = "1.0.0"
	// MicroQueueGroup lets replicas share the match endpoint's load.
	MicroQueueGroup = "ckf-indexer"
	// MicroEndpointName names the match endpoint.
	MicroEndpointName = "match"
	// MatchSubjectT is the endpoint subject (the contract is in pkg/api).
	MatchSubjectT = api.MatchSubjectT
	// MicroRouteEndpointName names the route endpoint (subject
	// api.RouteSubjectT).
	MicroRouteEndpointName = "route"
)

// RouteSubject returns the NATS micro route endpoint subject of a domain.
func RouteSubject(domain string) string { return api.RouteSubject(domain) }

// MatchSubject returns the NATS micro endpoint subject of a domain.
func MatchSubject(domain string) string { return api.MatchSubject(domain) }

// Endpoint is one domain's NATS micro service: MatchSubject(domain) and
// RouteSubject(domain) answer as POST /v1/match and /v1/route do, from the
// domain's follow.Service, and count into the domain's API metrics. It is
// the follow.Attachment global-indexer adds to every domain (Attach); Run
// of the service starts and stops it.
type Endpoint struct {
	s    *follow.Service
	apiM *queryapi.Metrics
	log  zerolog.Logger
	svc  micro.Service // set by Start
}

// Attach is follow.Config.Attach for global-indexer: each domain's service
// gets its Endpoint, with the API metrics registered on reg.
func Attach(s *follow.Service, reg prometheus.Registerer) (follow.Attachment, error) {
	return newEndpoint(s, reg)
}

func newEndpoint(s *follow.Service, reg prometheus.Registerer) (*Endpoint, error) {
	apiM, err := queryapi.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("indexer: API metrics: %w", err)
	}
	return &Endpoint{s: s, apiM: apiM, log: s.Logger()}, nil
}

// Start serves MatchSubject(domain): the body is the JSON of POST
// /v1/match and the reply the same JSON as HTTP, or api.ErrorJSON with the
// Nats-Service-Error-Code header set to the HTTP status. RouteSubject
// answers likewise.
func (e *Endpoint) Start() error {
	svc, err := e.start()
	if err != nil {
		return err
	}
	e.svc = svc
	return nil
}

// Stop stops the micro service.
func (e *Endpoint) Stop() error {
	if e.svc == nil {
		return nil
	}
	if err := e.svc.Stop(); err != nil {
		return fmt.Errorf("indexer: stop micro service: %w", err)
	}
	return nil
}

func (e *Endpoint) start() (micro.Service, error) {
	domain := e.s.Domain()
	svc, err := micro.AddService(e.s.Conn(), micro.Config{
		Name:        MicroServiceName,
		Version:     MicroServiceVersion,
		Description: "ckfrelay global indexer prefix queries",
		QueueGroup:  MicroQueueGroup,
		Metadata:    map[string]string{"domain": domain},
	})
	if err != nil {
		return nil, fmt.Errorf("indexer: add micro service: %w", err)
	}
	err = svc.AddEndpoint(MicroEndpointName, micro.HandlerFunc(e.handleMatch),
		micro.WithEndpointSubject(MatchSubject(domain)),
		micro.WithEndpointQueueGroup(MicroQueueGroup))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("indexer: add match endpoint: %w", err)
	}
	err = svc.AddEndpoint(MicroRouteEndpointName, micro.HandlerFunc(e.handleRoute),
		micro.WithEndpointSubject(RouteSubject(domain)),
		micro.WithEndpointQueueGroup(MicroQueueGroup))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("indexer: add route endpoint: %w", err)
	}
	return svc, nil
}

// handleRoute serves RouteSubject(domain) as handleMatch serves matches;
// a binary body takes its options from the api.HeaderRouteOptions header.
func (e *Endpoint) handleRoute(req micro.Request) {
	h := req.Headers()
	resp, status, err := queryapi.Route(context.Background(), e.s, e.apiM, h.Get("Content-Type"), h.Get(api.HeaderRouteOptions), req.Data())
	if err != nil {
		if rerr := req.Error(strconv.Itoa(status), err.Error(), api.ErrorJSON(err)); rerr != nil {
			e.log.Warn().Err(rerr).Msg("replying to a route request")
		}
		return
	}
	if err := req.Respond(resp.AppendJSON(nil)); err != nil {
		e.log.Warn().Err(err).Msg("replying to a route request")
	}
}

func (e *Endpoint) handleMatch(req micro.Request) {
	resp, status, err := queryapi.Match(context.Background(), e.s, e.apiM, req.Headers().Get("Content-Type"), req.Data())
	if err != nil {
		if rerr := req.Error(strconv.Itoa(status), err.Error(), api.ErrorJSON(err)); rerr != nil {
			e.log.Warn().Err(rerr).Msg("replying to a match request")
		}
		return
	}
	if err := req.Respond(resp.AppendJSON(nil)); err != nil {
		e.log.Warn().Err(err).Msg("replying to a match request")
	}
}

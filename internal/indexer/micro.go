package indexer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/micro"

	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/pkg/api"
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

// startMicro serves MatchSubject(domain): the body is the JSON of POST
// /v1/match and the reply the same JSON as HTTP, or api.ErrorJSON with the
// Nats-Service-Error-Code header set to the HTTP status.
func (s *Service) startMicro() (micro.Service, error) {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        MicroServiceName,
		Version:     MicroServiceVersion,
		Description: "ckfrelay global indexer prefix queries",
		QueueGroup:  MicroQueueGroup,
		Metadata:    map[string]string{"domain": s.cfg.Domain},
	})
	if err != nil {
		return nil, fmt.Errorf("indexer: add micro service: %w", err)
	}
	err = svc.AddEndpoint(MicroEndpointName, micro.HandlerFunc(s.handleMatch),
		micro.WithEndpointSubject(MatchSubject(s.cfg.Domain)),
		micro.WithEndpointQueueGroup(MicroQueueGroup))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("indexer: add match endpoint: %w", err)
	}
	err = svc.AddEndpoint(MicroRouteEndpointName, micro.HandlerFunc(s.handleRoute),
		micro.WithEndpointSubject(RouteSubject(s.cfg.Domain)),
		micro.WithEndpointQueueGroup(MicroQueueGroup))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("indexer: add route endpoint: %w", err)
	}
	return svc, nil
}

// handleRoute serves RouteSubject(domain) as handleMatch serves matches;
// a binary body takes its options from the api.HeaderRouteOptions header.
func (s *Service) handleRoute(req micro.Request) {
	h := req.Headers()
	resp, status, err := queryapi.Route(context.Background(), s, s.apiM, h.Get("Content-Type"), h.Get(api.HeaderRouteOptions), req.Data())
	if err != nil {
		if rerr := req.Error(strconv.Itoa(status), err.Error(), api.ErrorJSON(err)); rerr != nil {
			s.log.Warn().Err(rerr).Msg("replying to a route request")
		}
		return
	}
	if err := req.Respond(resp.AppendJSON(nil)); err != nil {
		s.log.Warn().Err(err).Msg("replying to a route request")
	}
}

func (s *Service) handleMatch(req micro.Request) {
	resp, status, err := queryapi.Match(context.Background(), s, s.apiM, req.Headers().Get("Content-Type"), req.Data())
	if err != nil {
		if rerr := req.Error(strconv.Itoa(status), err.Error(), api.ErrorJSON(err)); rerr != nil {
			s.log.Warn().Err(rerr).Msg("replying to a match request")
		}
		return
	}
	if err := req.Respond(resp.AppendJSON(nil)); err != nil {
		s.log.Warn().Err(err).Msg("replying to a match request")
	}
}

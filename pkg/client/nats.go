package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/ckfrelay/ckfrelay/pkg/api"
)

// NATS calls the match endpoint of a domain over a NATS connection; any
// indexer replica of the domain's queue group answers. It is safe for
// concurrent use.
type NATS struct {
	nc      *nats.Conn
	subject string
}

// NewNATS returns a client of domain's indexers on nc.
func NewNATS(nc *nats.Conn, domain string) *NATS {
	return &NATS{nc: nc, subject: api.MatchSubject(domain)}
}

// Match sends req and waits for the answer until ctx ends (ctx needs a
// deadline or cancellation: NATS requests have no default timeout here).
func (c *NATS) Match(ctx context.Context, req api.MatchRequest) (api.MatchResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.MatchResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	msg, err := c.nc.RequestWithContext(ctx, c.subject, body)
	if err != nil {
		return api.MatchResponse{}, fmt.Errorf("client: match over NATS: %w", err)
	}
	if len(msg.Data) > MaxResponseBytes {
		return api.MatchResponse{}, fmt.Errorf("%w: answer exceeds %d bytes", ErrBadResponse, MaxResponseBytes)
	}
	if code := msg.Header.Get(api.HeaderErrorCode); code != "" {
		status, err := strconv.Atoi(code)
		if err != nil || status < 100 || status > 999 {
			return api.MatchResponse{}, fmt.Errorf("%w: service error code %q", ErrBadResponse, code)
		}
		return api.MatchResponse{}, statusError(status, msg.Data, "")
	}
	return decodeAnswer(msg.Data)
}

var _ Matcher = (*NATS)(nil)

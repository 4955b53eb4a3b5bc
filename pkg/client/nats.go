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
	return c.request(ctx, &nats.Msg{Subject: c.subject, Data: body})
}

// MatchSequenceHashes sends hashes as an api.ContentTypeSeqHashes body
// (the type travels in the Content-Type header).
func (c *NATS) MatchSequenceHashes(ctx context.Context, hashes []uint64) (api.MatchResponse, error) {
	return c.request(ctx, &nats.Msg{Subject: c.subject, Data: seqHashesBody(hashes),
		Header: nats.Header{"Content-Type": []string{api.ContentTypeSeqHashes}}})
}

func (c *NATS) request(ctx context.Context, m *nats.Msg) (api.MatchResponse, error) {
	b, err := c.exchange(ctx, "match", m)
	if err != nil {
		return api.MatchResponse{}, err
	}
	return decodeAnswer(b)
}

// exchange sends m and returns the answer's bytes, or a *StatusError for
// a service error.
func (c *NATS) exchange(ctx context.Context, what string, m *nats.Msg) ([]byte, error) {
	msg, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("client: %s over NATS: %w", what, err)
	}
	if len(msg.Data) > MaxResponseBytes {
		return nil, fmt.Errorf("%w: answer exceeds %d bytes", ErrBadResponse, MaxResponseBytes)
	}
	if code := msg.Header.Get(api.HeaderErrorCode); code != "" {
		status, err := strconv.Atoi(code)
		if err != nil || status < 100 || status > 999 {
			return nil, fmt.Errorf("%w: service error code %q", ErrBadResponse, code)
		}
		return nil, statusError(status, msg.Data, "")
	}
	return msg.Data, nil
}

var _ Matcher = (*NATS)(nil)

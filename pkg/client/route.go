package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Router asks where to send a request: POST /v1/route over HTTP, the
// ckfq.<domain>.route endpoint over NATS, or a Mirror in process. *HTTP,
// *NATS and *Mirror implement it, with the same answers and errors.
type Router interface {
	// Route sends req (a match request plus route options) and returns
	// the DCs ranked, each with its cost terms.
	Route(ctx context.Context, req api.RouteRequest) (api.RouteResponse, error)
	// RouteSequenceHashes routes a request given as its sequence hashes
	// (the binary body), with its options.
	RouteSequenceHashes(ctx context.Context, hashes []uint64, o api.RouteOptions) (api.RouteResponse, error)
}

// Route sends req as JSON to POST /v1/route.
func (c *HTTP) Route(ctx context.Context, req api.RouteRequest) (api.RouteResponse, error) {
	var err error
	if req.Model, err = c.withModel(req.Model); err != nil {
		return api.RouteResponse{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return api.RouteResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	return c.route(ctx, c.routeURL(), "application/json", body)
}

// RouteSequenceHashes sends hashes as an api.ContentTypeSeqHashes body,
// the options (and ForModel's model) as the URL's query.
func (c *HTTP) RouteSequenceHashes(ctx context.Context, hashes []uint64, o api.RouteOptions) (api.RouteResponse, error) {
	u := c.routeURL()
	q := o.EncodeQuery()
	if mq := c.modelQuery(); mq != "" {
		q = strings.TrimPrefix(q+"&"+mq, "&")
	}
	if q != "" {
		u += "?" + q
	}
	return c.route(ctx, u, api.ContentTypeSeqHashes, seqHashesBody(hashes))
}

func (c *HTTP) routeURL() string { return strings.TrimSuffix(c.url, "/v1/match") + "/v1/route" }

func (c *HTTP) route(ctx context.Context, url, contentType string, body []byte) (api.RouteResponse, error) {
	b, err := c.exchange(ctx, "route", url, contentType, body)
	if err != nil {
		return api.RouteResponse{}, err
	}
	return decodeRouteAnswer(b)
}

// Route sends req as JSON to the domain's route endpoint.
func (c *NATS) Route(ctx context.Context, req api.RouteRequest) (api.RouteResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.RouteResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	return c.route(ctx, &nats.Msg{Subject: c.routeSubject(), Data: body})
}

// RouteSequenceHashes sends hashes as an api.ContentTypeSeqHashes body,
// the options in the api.HeaderRouteOptions header.
func (c *NATS) RouteSequenceHashes(ctx context.Context, hashes []uint64, o api.RouteOptions) (api.RouteResponse, error) {
	m := &nats.Msg{Subject: c.routeSubject(), Data: seqHashesBody(hashes), Header: nats.Header{"Content-Type": []string{api.ContentTypeSeqHashes}}}
	if q := o.EncodeQuery(); q != "" {
		m.Header.Set(api.HeaderRouteOptions, q)
	}
	return c.route(ctx, m)
}

// routeSubject is ckfq.<domain>.route beside ckfq.<domain>.match.
func (c *NATS) routeSubject() string { return strings.TrimSuffix(c.subject, ".match") + ".route" }

func (c *NATS) route(ctx context.Context, m *nats.Msg) (api.RouteResponse, error) {
	b, err := c.exchange(ctx, "route", m)
	if err != nil {
		return api.RouteResponse{}, err
	}
	return decodeRouteAnswer(b)
}

// Route answers req as POST /v1/route would, from the mirror's table and
// the lanes' load it follows.
func (m *Mirror) Route(_ context.Context, req api.RouteRequest) (api.RouteResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.RouteResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	q, o, err := api.DecodeRouteBody(body)
	if err != nil {
		return api.RouteResponse{}, badRequest(err)
	}
	return m.routeQuery(q, o)
}

// RouteSequenceHashes routes a request given as its sequence hashes, in
// the default domain (ForModel: another).
func (m *Mirror) RouteSequenceHashes(_ context.Context, hashes []uint64, o api.RouteOptions) (api.RouteResponse, error) {
	return m.routeSeqs("", hashes, o)
}

func (m *Mirror) routeSeqs(model string, hashes []uint64, o api.RouteOptions) (api.RouteResponse, error) {
	if len(hashes) > api.MaxBlocks {
		// The server refuses a binary body over its limit with 413.
		return api.RouteResponse{}, &StatusError{Status: 413, Message: fmt.Sprintf("more than %d blocks", api.MaxBlocks)}
	}
	if len(hashes) == 0 {
		return api.RouteResponse{}, badRequest(&api.RequestError{Reason: "empty request body"})
	}
	if err := checkModel(model); err != nil {
		return api.RouteResponse{}, err
	}
	// The options as the server would read them, validation included.
	o, err := api.ParseRouteOptions(o.EncodeQuery())
	if err != nil {
		return api.RouteResponse{}, badRequest(err)
	}
	seqs := make([]ckf.SequenceHash, len(hashes))
	for i, h := range hashes {
		seqs[i] = ckf.SequenceHash(h)
	}
	return m.routeQuery(api.Query{Seqs: seqs, Model: model}, o)
}

func (m *Mirror) routeQuery(q api.Query, o api.RouteOptions) (api.RouteResponse, error) {
	resp, err := m.reg.Route(q, o)
	if err != nil {
		var re *api.RequestError
		if errors.As(err, &re) {
			return api.RouteResponse{}, badRequest(re)
		}
		return api.RouteResponse{}, err
	}
	return resp, nil
}

// Route routes req for the model.
func (v *MirrorModel) Route(ctx context.Context, req api.RouteRequest) (api.RouteResponse, error) {
	var err error
	if req.Model, err = requestModel(v.model, req.Model); err != nil {
		return api.RouteResponse{}, err
	}
	return v.m.Route(ctx, req)
}

// RouteSequenceHashes routes hashes for the model.
func (v *MirrorModel) RouteSequenceHashes(_ context.Context, hashes []uint64, o api.RouteOptions) (api.RouteResponse, error) {
	return v.m.routeSeqs(v.model, hashes, o)
}

// decodeRouteAnswer decodes and checks a route answer: lanes within the
// table, each at most once, and best an eligible lane listed before every
// excluded one.
func decodeRouteAnswer(b []byte) (api.RouteResponse, error) {
	var r api.RouteResponse
	if err := decodeStrict(b, &r); err != nil {
		return api.RouteResponse{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	var seen uint32
	excluded := false
	for _, l := range r.Ranked {
		if l.Lane < 0 || l.Lane >= ckf.LaneCount || seen&(1<<l.Lane) != 0 {
			return api.RouteResponse{}, fmt.Errorf("%w: lane %d out of range or repeated", ErrBadResponse, l.Lane)
		}
		seen |= 1 << l.Lane
		if excluded && !l.Excluded {
			return api.RouteResponse{}, fmt.Errorf("%w: an eligible lane ranked after an excluded one", ErrBadResponse)
		}
		excluded = excluded || l.Excluded
	}
	if c := r.Chosen(); c == nil || c.Excluded {
		return api.RouteResponse{}, fmt.Errorf("%w: best %d is not an eligible lane", ErrBadResponse, r.Best)
	}
	return r, nil
}

var (
	_ Router = (*HTTP)(nil)
	_ Router = (*NATS)(nil)
	_ Router = (*Mirror)(nil)
)

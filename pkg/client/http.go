package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ckfrelay/ckfrelay/pkg/api"
)

// HTTP calls POST /v1/match of one indexer. It is safe for concurrent use.
type HTTP struct {
	url string
	hc  *http.Client
	// model is the model every request names ("" none: ForModel).
	model string
}

// NewHTTP returns a client of the indexer at baseURL (for example
// "http://127.0.0.1:8080"). hc nil uses http.DefaultClient; give it a
// Timeout or pass deadlines in each call's context.
func NewHTTP(baseURL string, hc *http.Client) (*HTTP, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &HTTP{url: strings.TrimSuffix(baseURL, "/") + "/v1/match", hc: hc}, nil
}

// ForModel is a client of the same indexer whose every request names
// model: a JSON request in its "model" (its own must be empty or the
// same), a binary one in the URL's ?model=. An indexer serving several
// domains answers it from model's, one serving one refuses another model
// (ErrUnknownModel).
func (c *HTTP) ForModel(model string) *HTTP {
	cc := *c
	cc.model = model
	return &cc
}

// withModel is the model of a request: c's, or the request's own.
func (c *HTTP) withModel(own string) (string, error) {
	return requestModel(c.model, own)
}

// requestModel is the model a request names when a client for model
// sends it with its own: one of them, or a refusal when they differ.
func requestModel(model, own string) (string, error) {
	if model == "" || own == model {
		return own, nil
	}
	if own != "" {
		return "", badRequest(&api.RequestError{Field: "model", Reason: fmt.Sprintf("%q in a request for %q", own, model)})
	}
	return model, nil
}

// modelQuery is the URL query naming c's model ("" none).
func (c *HTTP) modelQuery() string {
	if c.model == "" {
		return ""
	}
	return url.Values{api.ModelParam: {c.model}}.Encode()
}

// Match sends req and returns the answer, or a *StatusError for a refusal,
// or a transport or ErrBadResponse error.
func (c *HTTP) Match(ctx context.Context, req api.MatchRequest) (api.MatchResponse, error) {
	var err error
	if req.Model, err = c.withModel(req.Model); err != nil {
		return api.MatchResponse{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return api.MatchResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	return c.post(ctx, c.url, "application/json", body)
}

// MatchSequenceHashes sends hashes as an api.ContentTypeSeqHashes body
// (ForModel: with the model in the URL's query).
func (c *HTTP) MatchSequenceHashes(ctx context.Context, hashes []uint64) (api.MatchResponse, error) {
	u := c.url
	if q := c.modelQuery(); q != "" {
		u += "?" + q
	}
	return c.post(ctx, u, api.ContentTypeSeqHashes, seqHashesBody(hashes))
}

func (c *HTTP) post(ctx context.Context, url, contentType string, body []byte) (api.MatchResponse, error) {
	b, err := c.exchange(ctx, "match", url, contentType, body)
	if err != nil {
		return api.MatchResponse{}, err
	}
	return decodeAnswer(b)
}

// exchange POSTs body to url and returns a 200 answer's bytes (bounded by
// MaxResponseBytes), or a *StatusError for a refusal.
func (c *HTTP) exchange(ctx context.Context, what, url, contentType string, body []byte) ([]byte, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	hreq.Header.Set("Content-Type", contentType)
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", what, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("client: read answer: %w", err)
	}
	if len(b) > MaxResponseBytes {
		return nil, fmt.Errorf("%w: answer exceeds %d bytes", ErrBadResponse, MaxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	return b, nil
}

var _ Matcher = (*HTTP)(nil)

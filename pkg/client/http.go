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

// Match sends req and returns the answer, or a *StatusError for a refusal,
// or a transport or ErrBadResponse error.
func (c *HTTP) Match(ctx context.Context, req api.MatchRequest) (api.MatchResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.MatchResponse{}, fmt.Errorf("client: encode request: %w", err)
	}
	return c.post(ctx, "application/json", body)
}

// MatchSequenceHashes sends hashes as an api.ContentTypeSeqHashes body.
func (c *HTTP) MatchSequenceHashes(ctx context.Context, hashes []uint64) (api.MatchResponse, error) {
	return c.post(ctx, api.ContentTypeSeqHashes, seqHashesBody(hashes))
}

func (c *HTTP) post(ctx context.Context, contentType string, body []byte) (api.MatchResponse, error) {
	b, err := c.exchange(ctx, "match", c.url, contentType, body)
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

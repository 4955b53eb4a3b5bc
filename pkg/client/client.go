// Package client calls the global indexer's query API from Go: Match over
// HTTP (POST /v1/match) or over NATS (the ckfq.<domain>.match micro
// endpoint), with the same request and answer types (pkg/api) and the same
// typed errors for either transport.
//
// Every answer is read as untrusted input: bodies are bounded
// (MaxResponseBytes) and a reply that is not the documented JSON is an
// error, never a zero answer.
package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
)

// MaxResponseBytes bounds an answer body. A match answer names at most 16
// lanes, so a few KiB suffice; the bound only stops a hostile or broken
// server from making the caller buffer without limit.
const MaxResponseBytes = 1 << 20

// Matcher answers match requests; *HTTP and *NATS implement it.
type Matcher interface {
	Match(ctx context.Context, req api.MatchRequest) (api.MatchResponse, error)
	// MatchSequenceHashes asks for a request's sequence hashes in the
	// compact binary body (api.ContentTypeSeqHashes): the cheapest way
	// for a router that already hashed the request.
	MatchSequenceHashes(ctx context.Context, hashes []uint64) (api.MatchResponse, error)
}

// seqHashesBody is the api.ContentTypeSeqHashes encoding of hashes.
func seqHashesBody(hashes []uint64) []byte {
	b := make([]byte, 0, 8*len(hashes))
	for _, h := range hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return b
}

// The kinds of refusal, matched with errors.Is on a *StatusError.
var (
	// ErrBadRequest: the request was malformed or out of bounds (400), or
	// its Content-Type is one the server does not take (415);
	// StatusError.Field names the offending field when the server said.
	ErrBadRequest = errors.New("client: bad request")
	// ErrTooLarge: the request body exceeded the server's limit (413).
	ErrTooLarge = errors.New("client: request too large")
	// ErrOverloaded: the server refused for load (429); retry after
	// StatusError.RetryAfter.
	ErrOverloaded = errors.New("client: server overloaded")
	// ErrUnavailable is api.ErrUnavailable: no lane is ready (503); route
	// without the index.
	ErrUnavailable = api.ErrUnavailable
	// ErrUnknownModel is api.ErrUnknownDomain: the request named a model
	// (domain) the indexer does not serve (404).
	ErrUnknownModel = api.ErrUnknownDomain
	// ErrServer: any other refusal (5xx).
	ErrServer = errors.New("client: server error")
	// ErrBadResponse: the answer was not the documented JSON.
	ErrBadResponse = errors.New("client: malformed answer")
)

// StatusError is a refusal by the server, with its status (the HTTP status,
// or the NATS service error code, which carries the same number).
type StatusError struct {
	Status     int
	Message    string
	Field      string
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("client: status %d: %s", e.Status, msg)
}

// Unwrap maps the status to its kind.
func (e *StatusError) Unwrap() error {
	switch {
	case e.Status == http.StatusBadRequest, e.Status == http.StatusUnsupportedMediaType:
		return ErrBadRequest
	case e.Status == http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case e.Status == http.StatusTooManyRequests:
		return ErrOverloaded
	case e.Status == http.StatusServiceUnavailable:
		return ErrUnavailable
	case e.Status == http.StatusNotFound:
		return ErrUnknownModel
	default:
		return ErrServer
	}
}

// statusError builds the error of a refusal from its status and body (an
// api.ErrorBody when the server is ckfrelay's).
func statusError(status int, body []byte, retryAfter string) error {
	e := &StatusError{Status: status, Message: http.StatusText(status)}
	var eb api.ErrorBody
	if err := decodeStrict(body, &eb); err == nil && eb.Error != "" {
		e.Message, e.Field = eb.Error, eb.Field
	}
	if s, err := strconv.Atoi(retryAfter); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

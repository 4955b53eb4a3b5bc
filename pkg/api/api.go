// Package api is the query contract of the global indexer: the request a
// router sends to POST /v1/match (or to the ckfq.<domain>.match NATS
// endpoint), its decoder and limits, the answer and error shapes, and the
// rows of GET /v1/lanes. The server lives in internal/queryapi; a Go client
// is in this package.
package api

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// Limits on one match request.
const (
	MaxRequestBytes = 4 << 20
	MaxBlocks       = 1 << 16
	MaxBlockSize    = 1 << 16
)

// ErrUnavailable means no lane is ready; the caller should route elsewhere.
var ErrUnavailable = errors.New("api: no lane is ready")

// ErrUnknownDomain means the request named a model (domain) the indexer
// does not serve, or named none where it serves several and has no
// default; HTTP answers 404.
var ErrUnknownDomain = errors.New("api: unknown model")

// MaxModelBytes bounds the "model" (or "domain") of a request.
const MaxModelBytes = 256

// RequestError is a bad request; Field names the offending JSON field.
type RequestError struct {
	Field  string
	Reason string
}

func (e *RequestError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Query is a decoded match request: exactly one of Locals or Seqs is set.
type Query struct {
	Locals []ckf.LocalBlockHash
	Seqs   []ckf.SequenceHash
	// BlockSize is the block size of a tokens request (0 for the other
	// forms); a route uses it to count the tokens a DC holds.
	BlockSize int
	// Model is the domain (model) the request names with "model" or
	// "domain"; empty when it names none, and an indexer serving one
	// domain (or a default one) answers from that.
	Model string
}

// Blocks is the number of query positions.
func (q Query) Blocks() int { return len(q.Locals) + len(q.Seqs) }

// DecodeMatchRequest parses and validates a match request body. u64 values
// are decoded as integers (never through float64). See
// DecodeMatchRequestFrom.
func DecodeMatchRequest(body []byte) (Query, error) {
	if len(body) > MaxRequestBytes {
		return Query{}, &RequestError{Reason: fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes)}
	}
	return DecodeMatchBody(body)
}

// DecodeMatchBody decodes and validates a match request held whole, of any
// size the caller accepted: the common shapes in one pass, anything else
// through DecodeMatchRequestFrom (same answers, same errors).
func DecodeMatchBody(body []byte) (Query, error) {
	if q, ok := decodeFast(body); ok {
		return q, nil
	}
	return DecodeMatchRequestFrom(bytes.NewReader(body))
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &RequestError{Field: te.Field, Reason: fmt.Sprintf("cannot use %s as %s", te.Value, te.Type)}
	}
	if errors.Is(err, io.EOF) {
		return &RequestError{Reason: "empty request body"}
	}
	// encoding/json has no typed error for DisallowUnknownFields.
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		return &RequestError{Field: strings.TrimSuffix(name, `"`), Reason: "unknown field"}
	}
	return &RequestError{Reason: "malformed JSON: " + err.Error()}
}

// LaneDepth is one lane's answer.
type LaneDepth struct {
	Lane  int    `json:"lane"`
	DC    string `json:"dc"`
	Pool  string `json:"pool"`
	Depth uint32 `json:"depth"`
	// AgeMs is how long ago the lane last heard from its relay (any
	// message of its installed epoch, heartbeats included), by the time
	// JetStream stored that message; -1 when it never has.
	AgeMs int64 `json:"age_ms"`
	// Stale: AgeMs passed the indexer's --lane-stale-after, so the answer
	// may be out of date (a DC cut off, a relay gone). A stale lane is
	// never Best.
	Stale bool `json:"stale"`
}

// MatchResponse is the JSON answer of a match.
type MatchResponse struct {
	ReadyLanes uint16      `json:"ready_lanes"`
	Blocks     int         `json:"blocks"`
	Lanes      []LaneDepth `json:"lanes"`
	Best       *LaneDepth  `json:"best"`
}

// SetBest picks the deepest fresh lane (lowest lane number on ties); none
// when every fresh lane's depth is 0.
func (r *MatchResponse) SetBest() {
	r.Best = nil
	for i := range r.Lanes {
		l := &r.Lanes[i]
		if l.Depth > 0 && !l.Stale && (r.Best == nil || l.Depth > r.Best.Depth) {
			r.Best = l
		}
	}
}

// LaneStatus is one row of GET /v1/lanes.
type LaneStatus struct {
	// Domain is the domain (model) the lane belongs to.
	Domain            string `json:"domain,omitempty"`
	Lane              int    `json:"lane"`
	DC                string `json:"dc"`
	Pool              string `json:"pool"`
	State             string `json:"state"`
	Epoch             uint64 `json:"epoch"`
	InstalledSequence uint64 `json:"installed_sequence"`
	StreamLag         uint64 `json:"stream_lag_messages"`
	// AgeMs and Stale: see LaneDepth.
	AgeMs     int64  `json:"age_ms"`
	Stale     bool   `json:"stale"`
	LastFault string `json:"last_fault,omitempty"`
	// Source is where the lane comes from: "nats" (a relay's lane on the
	// hub) or "kvrelay" (a dynamo.kvrelay.v1 relay).
	Source string `json:"source,omitempty"`
	// Address, Producer and LastFrameAgeMs describe a kvrelay lane: the
	// relay's HOST:PORT, the followed producer key, and how long ago its
	// last frame arrived (absent before the first).
	Address        string `json:"address,omitempty"`
	Producer       string `json:"producer,omitempty"`
	LastFrameAgeMs *int64 `json:"last_frame_age_ms,omitempty"`
}

// ErrorBody is the JSON shape of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// ErrorJSON renders err as an ErrorBody.
func ErrorJSON(err error) []byte {
	body := ErrorBody{Error: err.Error()}
	var re *RequestError
	if errors.As(err, &re) {
		body.Field = re.Field
	}
	b, _ := json.Marshal(body)
	return b
}

// MatchRequest is the body of a match request, for clients. Set exactly
// one of Tokens (with BlockSize, and the salts that shaped the cache),
// LocalHashes or SequenceHashes.
type MatchRequest struct {
	// Model names the domain to answer from; empty: the indexer's only
	// (or default) domain.
	Model          string   `json:"model,omitempty"`
	Tokens         []uint32 `json:"tokens,omitempty"`
	BlockSize      int      `json:"block_size,omitempty"`
	LoraName       string   `json:"lora_name,omitempty"`
	CacheNamespace string   `json:"cache_namespace,omitempty"`
	Eagle          bool     `json:"eagle,omitempty"`
	LocalHashes    []uint64 `json:"local_hashes,omitempty"`
	SequenceHashes []uint64 `json:"sequence_hashes,omitempty"`
}

// MatchSubjectT is the NATS micro endpoint's subject, %s being the domain.
// It stays outside the lane stream's subjects (ckf.>): a request published
// on a stream subject would be stored and acknowledged by JetStream, and
// the requester would get the PubAck instead of the answer.
const MatchSubjectT = "ckfq.%s.match"

// MatchSubject is the NATS subject that answers match requests of domain.
func MatchSubject(domain string) string { return fmt.Sprintf(MatchSubjectT, domain) }

// NATS error replies carry the HTTP status of the error in this header
// (the micro protocol's service error code) and ErrorJSON as the body.
const (
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
)

// ContentTypeSeqHashes is the compact body of a match request for callers
// that already hold the request's sequence hashes: the hashes as
// consecutive little-endian u64, nothing else (8 to 8·MaxBlocks bytes).
const ContentTypeSeqHashes = "application/x-ckf-seqhashes"

// DecodeSeqHashes decodes a ContentTypeSeqHashes body. It refuses an empty
// body, a length that is not a multiple of 8 and more than MaxBlocks
// hashes, with a *RequestError.
func DecodeSeqHashes(body []byte) (Query, error) {
	switch {
	case len(body) == 0:
		return Query{}, &RequestError{Reason: "empty request body"}
	case len(body)%8 != 0:
		return Query{}, &RequestError{Reason: fmt.Sprintf("%s body of %d bytes is not a whole number of u64 hashes", ContentTypeSeqHashes, len(body))}
	case len(body)/8 > MaxBlocks:
		return Query{}, &RequestError{Field: "sequence_hashes", Reason: fmt.Sprintf("more than %d blocks", MaxBlocks)}
	}
	seqs := make([]ckf.SequenceHash, len(body)/8)
	for i := range seqs {
		seqs[i] = ckf.SequenceHash(binary.LittleEndian.Uint64(body[8*i:]))
	}
	return Query{Seqs: seqs}, nil
}

// Package replay turns a Mooncake-style request trace into Dynamo RouterEvents
// for a fleet of workers spread over several DCs, with a per-worker LRU cache
// model, and keeps the exact per-DC ground truth so every CKF answer can be
// checked.
package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ckfrelay/ckfrelay/data"
)

// Request is one trace line.
type Request struct {
	Timestamp    int64    `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// maxLine bounds one trace line; the Mooncake lines are a few KiB.
const maxLine = 4 << 20

// ReadTrace reads JSONL requests, transparently gunzipping gzip input.
func ReadTrace(r io.Reader) ([]Request, error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("replay: gzip: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var out []Request
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var req Request
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, fmt.Errorf("replay: line %d: %w", line, err)
		}
		if len(req.HashIDs) == 0 {
			return nil, fmt.Errorf("replay: line %d: empty hash_ids", line)
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("replay: line %d: %w", line+1, err)
	}
	if len(out) == 0 {
		return nil, errors.New("replay: trace has no requests")
	}
	return out, nil
}

// LoadEmbedded returns the shipped Mooncake conversation trace.
func LoadEmbedded() ([]Request, error) {
	return ReadTrace(bytes.NewReader(data.MooncakeConversationTraceGz))
}

// LoadEmbeddedSynthetic returns the shipped Mooncake synthetic trace.
func LoadEmbeddedSynthetic() ([]Request, error) {
	return ReadTrace(bytes.NewReader(data.MooncakeSyntheticTraceGz))
}

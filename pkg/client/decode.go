package client

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// decodeStrict decodes one JSON value into v; trailing data is an error.
// Unknown fields are not: a newer server may add fields to its answers,
// and an older client must keep working.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the answer")
	}
	return nil
}

// decodeAnswer decodes and checks a match answer: lanes within the table,
// each at most once, and Best pointing at the deepest of them.
func decodeAnswer(b []byte) (api.MatchResponse, error) {
	var r api.MatchResponse
	if err := decodeStrict(b, &r); err != nil {
		return api.MatchResponse{}, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	var seen uint32
	for _, l := range r.Lanes {
		if l.Lane < 0 || l.Lane >= ckf.LaneCount || seen&(1<<l.Lane) != 0 {
			return api.MatchResponse{}, fmt.Errorf("%w: lane %d out of range or repeated", ErrBadResponse, l.Lane)
		}
		seen |= 1 << l.Lane
	}
	// Best is a copy in the JSON; point it into Lanes, as SetBest does, and
	// refuse an answer whose best is not the deepest lane.
	claimed := r.Best
	r.SetBest()
	if (claimed == nil) != (r.Best == nil) || (claimed != nil && *claimed != *r.Best) {
		return api.MatchResponse{}, fmt.Errorf("%w: best lane is not the deepest", ErrBadResponse)
	}
	return r, nil
}

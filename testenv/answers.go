package testenv

import (
	"reflect"
	"slices"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// WithoutAges is r with every lane's age zeroed: two answers given a few
// milliseconds apart differ in age_ms and nothing else.
func WithoutAges(r api.MatchResponse) api.MatchResponse {
	r.Lanes = slices.Clone(r.Lanes)
	for i := range r.Lanes {
		r.Lanes[i].AgeMs = 0
	}
	r.SetBest()
	return r
}

// SameAnswer reports whether a and b are the same answer but for the
// lanes' ages.
func SameAnswer(a, b api.MatchResponse) bool {
	return reflect.DeepEqual(WithoutAges(a), WithoutAges(b))
}

// Chain is a token-prefix chain of n local block hashes drawn from seed:
// the same seed gives the same chain, and no hash is zero.
func Chain(seed uint64, n int) []ckf.LocalBlockHash {
	out := make([]ckf.LocalBlockHash, n)
	x := seed
	for i := range out {
		x = x*0x9E3779B97F4A7C15 + 0xD1B54A32D192ED03
		out[i] = ckf.LocalBlockHash(x ^ (x >> 29) | 1)
	}
	return out
}

// LaneDepth is lane's row of resp, if it has one.
func LaneDepth(resp api.MatchResponse, lane int) (api.LaneDepth, bool) {
	for _, l := range resp.Lanes {
		if l.Lane == lane {
			return l, true
		}
	}
	return api.LaneDepth{}, false
}

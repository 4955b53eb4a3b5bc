package testenv

import (
	"reflect"
	"slices"

	"github.com/ckfrelay/ckfrelay/pkg/api"
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

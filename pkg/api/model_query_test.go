package api

import (
	"errors"
	"strings"
	"testing"
)

func TestSplitModelQuery(t *testing.T) {
	for _, tc := range []struct{ raw, model, rest string }{
		{"", "", ""},
		{"policy=prefix", "", "policy=prefix"},
		{"model=llama", "llama", ""},
		{"domain=llama", "llama", ""},
		{"model=meta%2Fllama&policy=prefix&input_tokens=900", "meta/llama", "input_tokens=900&policy=prefix"},
	} {
		model, rest, err := SplitModelQuery(tc.raw)
		if err != nil || model != tc.model || rest != tc.rest {
			t.Fatalf("%q: %q %q %v, want %q %q", tc.raw, model, rest, err, tc.model, tc.rest)
		}
	}
	for _, bad := range []string{
		"model=a&domain=b", "model=a&model=a", "model=", "domain=" + strings.Repeat("x", MaxModelBytes+1), "model=%zz",
	} {
		var re *RequestError
		if _, _, err := SplitModelQuery(bad); !errors.As(err, &re) {
			t.Fatalf("%q: %v, want a *RequestError", bad, err)
		}
	}
}

// Whatever the query, SplitModelQuery either refuses it or gives a model
// within bounds and a rest that no longer names one.
func FuzzSplitModelQuery(f *testing.F) {
	for _, s := range []string{"", "model=llama", "domain=a&policy=prefix", "model=a&model=b", "rtt_ms=dc-a:5&model=%2F", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		model, rest, err := SplitModelQuery(raw)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("%q: %v is not a *RequestError", raw, err)
			}
			return
		}
		if len(model) > MaxModelBytes {
			t.Fatalf("%q: model of %d bytes", raw, len(model))
		}
		if model == "" {
			if rest != raw {
				t.Fatalf("%q: no model, rest %q", raw, rest)
			}
			return
		}
		again, _, err := SplitModelQuery(rest)
		if err != nil || again != "" {
			t.Fatalf("%q: rest %q still names %q (%v)", raw, rest, again, err)
		}
	})
}

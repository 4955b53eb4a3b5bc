package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/internal/cli"
)

func TestHealthyOnlyWhenEveryURLAnswers2xx(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer ok.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer down.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{ok.URL}, 0, ""},
		{[]string{ok.URL, down.URL}, 1, "status 503"},
		{[]string{"--timeout", "50ms", slow.URL}, 1, "Timeout"},
		{[]string{"http://127.0.0.1:1/"}, 1, "refused"},
		{nil, 2, "usage"},
	} {
		var errb bytes.Buffer
		if code := run(context.Background(), c.args, &errb); code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Fatalf("%v: exit %d (%q), want %d with %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out); code != 0 || !strings.HasPrefix(out.String(), "ckf-health "+cli.Version()) {
		t.Fatalf("exit %d, %q", code, out.String())
	}
}

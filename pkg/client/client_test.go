package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
)

// answering serves one fixed reply to every request, as a broken or
// hostile server would.
func answering(t *testing.T, status int, hdr map[string]string, body string) *HTTP {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c, err := NewHTTP(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func match(c Matcher) (api.MatchResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Match(ctx, api.MatchRequest{LocalHashes: []uint64{1, 2}})
}

func TestRefusalsAreTypedWithTheirDetails(t *testing.T) {
	for _, tc := range []struct {
		status int
		hdr    map[string]string
		body   string
		kind   error
		field  string
		retry  time.Duration
	}{
		{400, nil, `{"error":"block_size: must be within 1..65536","field":"block_size"}`, ErrBadRequest, "block_size", 0},
		{413, nil, `{"error":"request body exceeds 4194304 bytes"}`, ErrTooLarge, "", 0},
		{415, nil, `{"error":"content type \"text/plain\" is not accepted: send application/json (or no Content-Type) or application/x-ckf-seqhashes"}`, ErrBadRequest, "", 0},
		{429, map[string]string{"Retry-After": "1"}, `{"error":"more than 64 match requests in progress; retry later"}`, ErrOverloaded, "", time.Second},
		{503, nil, `{"error":"api: no lane is ready"}`, ErrUnavailable, "", 0},
		{404, nil, `{"error":"domains: \"gemma\" is not served: api: unknown model"}`, ErrUnknownModel, "", 0},
		{500, nil, `not json at all`, ErrServer, "", 0},
		{502, nil, ``, ErrServer, "", 0},
	} {
		_, err := match(answering(t, tc.status, tc.hdr, tc.body))
		var se *StatusError
		if !errors.Is(err, tc.kind) || !errors.As(err, &se) {
			t.Fatalf("status %d: got %v, want %v", tc.status, err, tc.kind)
		}
		if se.Status != tc.status || se.Field != tc.field || se.RetryAfter != tc.retry || se.Message == "" {
			t.Fatalf("status %d: %+v", tc.status, se)
		}
	}
}

func TestMalformedAnswersAreErrorsNotZeroAnswers(t *testing.T) {
	lane := func(n, depth int) string {
		return `{"lane":` + itoa(n) + `,"dc":"dc","pool":"p","depth":` + itoa(depth) + `}`
	}
	for name, body := range map[string]string{
		"not JSON":         `<html>`,
		"wrong type":       `{"ready_lanes":"1","blocks":2,"lanes":[],"best":null}`,
		"trailing data":    `{"ready_lanes":1,"blocks":2,"lanes":[],"best":null} {}`,
		"lane too high":    `{"ready_lanes":1,"blocks":2,"lanes":[` + lane(16, 1) + `],"best":` + lane(16, 1) + `}`,
		"negative lane":    `{"ready_lanes":1,"blocks":2,"lanes":[` + lane(-1, 1) + `],"best":` + lane(-1, 1) + `}`,
		"repeated lane":    `{"ready_lanes":1,"blocks":2,"lanes":[` + lane(1, 1) + `,` + lane(1, 2) + `],"best":` + lane(1, 2) + `}`,
		"best not deepest": `{"ready_lanes":2,"blocks":2,"lanes":[` + lane(1, 1) + `,` + lane(2, 2) + `],"best":` + lane(1, 1) + `}`,
		"best missing":     `{"ready_lanes":1,"blocks":2,"lanes":[` + lane(1, 1) + `],"best":null}`,
		"best invented":    `{"ready_lanes":1,"blocks":2,"lanes":[` + lane(1, 0) + `],"best":` + lane(1, 3) + `}`,
		"oversized":        `{"ready_lanes":1,"blocks":2,"lanes":[],"best":null,"pad":"` + strings.Repeat("x", MaxResponseBytes) + `"}`,
	} {
		if r, err := match(answering(t, 200, nil, body)); !errors.Is(err, ErrBadResponse) {
			t.Fatalf("%s: got %+v, %v; want ErrBadResponse", name, r, err)
		}
	}
}

// A newer server's extra fields do not break an older client.
func TestUnknownAnswerFieldsAreIgnored(t *testing.T) {
	r, err := match(answering(t, 200, nil, `{"ready_lanes":1,"blocks":2,"lanes":[{"lane":0,"dc":"a","pool":"p","depth":1,"new":true}],"best":{"lane":0,"dc":"a","pool":"p","depth":1},"extra":1}`))
	if err != nil || r.Best == nil || r.Best.Depth != 1 {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestAWellFormedAnswerPointsBestIntoLanes(t *testing.T) {
	body := `{"ready_lanes":2,"blocks":2,"lanes":[{"lane":0,"dc":"a","pool":"p","depth":1},{"lane":3,"dc":"b","pool":"q","depth":2}],"best":{"lane":3,"dc":"b","pool":"q","depth":2}}`
	r, err := match(answering(t, 200, nil, body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Best != &r.Lanes[1] || r.ReadyLanes != 2 || r.Blocks != 2 {
		t.Fatalf("%+v", r)
	}
}

func TestNewHTTPRefusesUnusableURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://", "://bad"} {
		if _, err := NewHTTP(u, nil); err == nil {
			t.Fatalf("NewHTTP(%q) accepted", u)
		}
	}
	c, err := NewHTTP("http://127.0.0.1:8080/", nil)
	if err != nil || c.url != "http://127.0.0.1:8080/v1/match" {
		t.Fatalf("%v %+v", err, c)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A route answer's estimated prefill reaches the caller with its figure; a
// lane without the mark reads as measured.
func TestRouteAnswerKeepsAnEstimatedPrefill(t *testing.T) {
	lane := func(n int, dc, load string) string {
		return `{"lane":` + strconv.Itoa(n) + `,"dc":"` + dc + `","pool":"p","depth":0,"ready":true,"age_ms":1,"stale":false,"cached_tokens":0,"cost_ms":1,` +
			`"terms":{"rtt_ms":1,"queue_ms":0,"prefill_ms":0,"penalty_ms":0},"load_missing":false,"rtt_unknown":false,"load":` + load + `,"excluded":false}`
	}
	body := `{"policy":"cost","ready_lanes":2,"blocks":1,"block_size":16,"input_tokens":16,"ranked":[` +
		lane(0, "a", `{"running":1,"waiting":4,"active_prefill_tokens":4096,"prefill_estimated":true,"age_ms":3}`) + `,` +
		lane(1, "b", `{"active_prefill_tokens":100,"age_ms":3}`) + `],"best":0}`
	r, err := answering(t, 200, nil, body).Route(context.Background(), api.RouteRequest{MatchRequest: api.MatchRequest{SequenceHashes: []uint64{1}}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := r.Ranked[0].Load, r.Ranked[1].Load; !a.HasPrefill || a.ActivePrefillTokens != 4096 || !a.PrefillEstimated ||
		!b.HasPrefill || b.PrefillEstimated {
		t.Fatalf("loads %+v and %+v", a, b)
	}
}

package wanproxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string) (int, Status, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st Status
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return resp.StatusCode, st, string(b)
}

func TestControlAPIChangesTheLinkAndRefusesBadBodies(t *testing.T) {
	echo := startEcho(t)
	l := newLink(t, echo.addr())
	srv := httptest.NewServer(NewHandler(l)) // a real loopback HTTP server
	defer srv.Close()

	code, st, body := post(t, srv.URL+"/v1/latency", `{"direction":"both","delay":"75ms","jitter":"10ms"}`)
	if code != 200 || st.Toxics.Up.Delay != Duration(75*time.Millisecond) || st.Toxics.Down.Jitter != Duration(10*time.Millisecond) {
		t.Fatalf("latency: %d %s", code, body)
	}
	code, st, body = post(t, srv.URL+"/v1/latency", `{"direction":"up","delay":20}`) // a number is milliseconds
	if code != 200 || st.Toxics.Up.Delay != Duration(20*time.Millisecond) || st.Toxics.Down.Delay != Duration(75*time.Millisecond) {
		t.Fatalf("latency up: %d %s", code, body)
	}
	code, st, body = post(t, srv.URL+"/v1/bandwidth", `{"bytes_per_second":1250000}`)
	if code != 200 || st.Toxics.Up.BytesPerSecond != 1250000 || st.Toxics.Down.BytesPerSecond != 1250000 {
		t.Fatalf("bandwidth: %d %s", code, body)
	}
	if code, st, body = post(t, srv.URL+"/v1/stall", ``); code != 200 || !st.Toxics.Stalled {
		t.Fatalf("stall: %d %s", code, body)
	}
	if code, st, body = post(t, srv.URL+"/v1/cut", ``); code != 200 || !st.Toxics.Cut {
		t.Fatalf("cut: %d %s", code, body)
	}
	if code, st, body = post(t, srv.URL+"/v1/heal", ``); code != 200 || st.Toxics.Cut || st.Toxics.Stalled {
		t.Fatalf("heal: %d %s", code, body)
	}
	c := dial(t, l)
	roundTrip(t, c)
	if code, st, body = post(t, srv.URL+"/v1/reset", ``); code != 200 || st.Stats.Resets != 1 {
		t.Fatalf("reset: %d %s", code, body)
	}
	if code, st, body = post(t, srv.URL+"/v1/clear", ``); code != 200 || st.Toxics != (Toxics{}) {
		t.Fatalf("clear: %d %s", code, body)
	}

	for path, bad := range map[string]string{
		"/v1/latency":   `{"direction":"sideways","delay":"1ms"}`,
		"/v1/bandwidth": `{"bytes_per_second":-5}`,
		"/v1/stall":     `{"timeout":"soon"}`,
	} {
		if code, _, body := post(t, srv.URL+path, bad); code != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: %d %s, want 400 with an error", path, bad, code, body)
		}
	}
	if code, _, body := post(t, srv.URL+"/v1/latency", `{"delay":"1ms","color":"red"}`); code != http.StatusBadRequest {
		t.Errorf("unknown field: %d %s", code, body)
	}
	if code, _, _ := post(t, srv.URL+"/v1/latency", strings.Repeat(" ", maxBody+1)); code != http.StatusBadRequest {
		t.Errorf("oversized body: %d", code)
	}
	resp, err := http.Get(srv.URL + "/v1/cut")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/cut: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz %d", resp.StatusCode)
	}
	var got Status
	resp, err = http.Get(srv.URL + "/v1/link")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Name != "test" || len(got.Routes) != 1 {
		t.Fatalf("status %+v %v", got, err)
	}
}

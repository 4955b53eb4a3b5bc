package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// startMonitored runs a JetStream server in domain "dc-x" with its
// monitoring port open and returns its client and monitoring URLs.
func startMonitored(t *testing.T) (string, string) {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName: "n1", Host: "127.0.0.1", Port: -1, HTTPHost: "127.0.0.1", HTTPPort: -1,
		JetStream: true, JetStreamDomain: "dc-x", StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return s.ClientURL(), fmt.Sprintf("http://%s", s.MonitorAddr())
}

// The series come from a real server's /varz and /jsz: a stream's message
// count, the JetStream domain, the connection; a second target that does
// not answer reports up 0 and no other series.
func TestCollectsARealServerAndMarksADownOneDown(t *testing.T) {
	clientURL, monURL := startMonitored(t)
	nc, err := nats.Connect(clientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KVEVENTS", Subjects: []string{"kv.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "kv.a", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()

	c := newCollector([]target{{"hub", monURL}, {"gone", down.URL}}, &http.Client{Timeout: 2 * time.Second})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	for series, want := range map[string]float64{
		"ckf_nats_server_up{server=gone}":                                        0,
		"ckf_nats_server_up{server=hub}":                                         1,
		"ckf_nats_server_stream_messages{account=$G,server=hub,stream=KVEVENTS}": 3,
		"ckf_nats_server_jetstream_enabled{domain=dc-x,server=hub}":              1,
		"ckf_nats_server_jetstream_streams{server=hub}":                          1,
		"ckf_nats_server_connections{server=hub}":                                1,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if got["ckf_nats_server_in_msgs_total{server=hub}"] < 3 {
		t.Errorf("in_msgs %v after 3 publishes", got["ckf_nats_server_in_msgs_total{server=hub}"])
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "server" && l.GetValue() == "gone" && mf.GetName() != "ckf_nats_server_up" {
					t.Errorf("down server reported %s", mf.GetName())
				}
			}
		}
	}
}

func TestTargetsAndFlags(t *testing.T) {
	for _, bad := range [][]string{nil, {"http://x:8222"}, {"=http://x:8222"}, {"a=x:8222"}, {"a=http://x:1", "a=http://y:1"}} {
		if _, err := parseTargets(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	got, err := parseTargets([]string{"hub=http://nats-hub:8222/"})
	if err != nil || len(got) != 1 || got[0] != (target{"hub", "http://nats-hub:8222"}) {
		t.Fatalf("%v %v", got, err)
	}
	var out bytes.Buffer
	if code := run(context.Background(), nil, &out); code != 2 || !strings.Contains(out.String(), "usage:") {
		t.Fatalf("no targets: exit %d %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--version"}, &out); code != 0 || !strings.HasPrefix(out.String(), "ckf-nats-exporter ") {
		t.Fatalf("--version: exit %d %q", code, out.String())
	}
}

// Stopped by a signal (its context's cause), the exporter says so last.
func TestLogsItsStopWithTheReason(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("terminated signal received"))
	var out bytes.Buffer
	if code := run(ctx, []string{"--listen", "127.0.0.1:0", "hub=http://127.0.0.1:1"}, &out); code != 0 ||
		!strings.HasSuffix(out.String(), "ckf-nats-exporter: stopped (terminated signal received)\n") {
		t.Fatalf("exit %d %q", code, out.String())
	}
}

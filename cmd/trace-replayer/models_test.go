package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// Two models across two DCs: one relay process per DC runs a pool per
// model, one indexer serves both; the replayer sends each request to one
// model and verifies each model on its own.
func TestTwoModelsVerifyEachOnItsOwn(t *testing.T) {
	srv := testenv.StartServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	reg, err := domains.New(nc, js, domains.Config{Domains: []string{"m1", "m2"},
		Base: follow.Config{Pool: pc, Streams: streams.Options{Memory: true}}})
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = reg.Run(ctx) }()
	apiM, err := queryapi.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(queryapi.Handler(reg, apiM, nil))
	t.Cleanup(hs.Close)
	for _, dc := range []string{"dc-a", "dc-b"} {
		rc := relay.DefaultConfig("default", dc)
		rc.CKF = ckf.NewConfig(1 << 15)
		rc.Streams = streams.Options{Memory: true}
		m, err := pools.New(srv.Connect(t), js, pools.Config{Base: rc, File: pools.File{Pools: []pools.PoolSpec{{Domain: "m1"}, {Domain: "m2"}}}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Run(ctx) }()
	}
	args := []string{"--nats-url", srv.URL(), "--indexer-url", hs.URL, "--domain", "m1,m2", "--dcs", "dc-a,dc-b",
		"--speed", "0", "--max-requests", "400", "--workers-per-dc", "2", "--verify-timeout", "60s"}
	var out, errb bytes.Buffer
	if code := run(ctx, args, func(string) string { return "" }, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, m := range []string{"m1", "m2"} {
		if !strings.Contains(out.String(), "["+m+"] verify:") || !strings.Contains(out.String(), "no false negative") {
			t.Fatalf("model %s not verified:\n%s", m, out.String())
		}
	}
	// Both models got requests: each has lanes with data.
	for _, m := range []string{"m1", "m2"} {
		if ready, _ := reg.DomainReady(m); !ready {
			t.Fatalf("model %s not ready", m)
		}
	}
}

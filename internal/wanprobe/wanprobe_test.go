package wanprobe

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/queryapi"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/client"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

const domain = "probe"

// pipeline runs a real relay for dc-p and a real indexer on one embedded
// JetStream server, the indexer's query API on a loopback port, and
// returns a prober of dc-p (and the query client).
func pipeline(t *testing.T) (*Prober, *client.HTTP, *testenv.Server) {
	t.Helper()
	srv := testenv.StartServer(t)
	nc := srv.Connect(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done })

	rc := relay.DefaultConfig(domain, "dc-p")
	rc.Instance = "relay-p"
	rc.CKF = ckf.NewConfig(1 << 15)
	rc.PublishInterval = 2 * time.Millisecond
	rc.SnapshotInterval = time.Hour
	rc.LeaseTTL = 3 * time.Second
	rc.Streams = streams.Options{Memory: true}
	rc.Logger = zerolog.Nop()
	r, err := relay.New(nc, js, rc)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Run(ctx); done <- struct{}{} }()

	ix, err := indexer.New(nc, js, follow.Config{Domain: domain, Logger: zerolog.Nop(), Streams: streams.Options{Memory: true},
		BootstrapBackoffMin: 10 * time.Millisecond, BootstrapBackoffMax: 200 * time.Millisecond, StatePollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ix.Run(ctx); done <- struct{}{} }()
	web := httptest.NewServer(queryapi.Handler(ix, ix.APIMetrics(), nil))
	t.Cleanup(web.Close)
	hc, err := client.NewHTTP(web.URL, &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "dc-p's lane active", func() bool {
		for _, l := range ix.Lanes() {
			if l.DC == "dc-p" && l.State == "active" {
				return true
			}
		}
		return false
	})
	p, err := New(Config{JS: js, Indexer: hc, Domain: domain, DC: "dc-p", Worker: 9000, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return p, hc, srv
}

func TestProbeSeesItsBlockQueryableAndRemovesIt(t *testing.T) {
	p, _, _ := pipeline(t)
	ctx := context.Background()
	total, ack, err := p.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if total <= 0 || ack <= 0 || ack > total {
		t.Fatalf("total %s, ack %s", total, ack)
	}
	st := p.Probes(ctx, 10, 5*time.Millisecond)
	if st.N != 10 || st.Failed != 0 || st.P50 <= 0 || st.P99 < st.P50 || st.Max < st.P99 {
		t.Fatalf("probes: %+v", st)
	}
	t.Log(st)
}

func TestLoadIsPacedAndDrains(t *testing.T) {
	p, _, _ := pipeline(t)
	ctx := context.Background()
	start := time.Now()
	res, err := p.Load(ctx, LoadConfig{Rate: 1000, Duration: time.Second, Live: 200})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); res.Offered != 1000 || res.Acked != 1000 || res.Failed != 0 || took < 900*time.Millisecond {
		t.Fatalf("load %v in %s", res, took)
	}
	if res.AckedPerSecond < 700 || res.AckedPerSecond > 1300 {
		t.Fatalf("acked at %.0f/s, offered 1000/s", res.AckedPerSecond)
	}
	if res.Drain <= 0 || res.Drain > 10*time.Second {
		t.Fatalf("drain %s", res.Drain)
	}
	t.Log(res)
}

func TestProbeOfALaneNobodyServesTimesOut(t *testing.T) {
	_, hc, srv := pipeline(t)
	q, err := New(Config{JS: srv.JetStream(t), Indexer: hc, Domain: domain, DC: "dc-none", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Probe(context.Background()); !errors.Is(err, ErrNotQueryable) {
		t.Fatalf("probe of an unserved DC: %v, want ErrNotQueryable", err)
	}
}

func TestConfigIsValidated(t *testing.T) {
	for name, c := range map[string]Config{
		"no JetStream": {Domain: domain, DC: "dc-p"},
		"bad dc":       {JS: nil, Domain: domain, DC: "a b"},
	} {
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	p := &Prober{}
	if _, err := p.Load(context.Background(), LoadConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("zero load: %v", err)
	}
}

func TestQuantileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if q := Quantile(d, 0.5); q != 50*time.Millisecond {
		t.Fatalf("p50 %s", q)
	}
	if q := Quantile(d, 0.99); q != 99*time.Millisecond {
		t.Fatalf("p99 %s", q)
	}
	if Quantile(nil, 0.5) != 0 {
		t.Fatal("empty")
	}
}

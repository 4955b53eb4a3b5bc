package follow

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// BenchmarkRouteVsMatch serves the same JSON body, a 64-block prompt given
// as local hashes, as POST /v1/match and as POST /v1/route are served
// (the body decoded, answered and the answer encoded, without the query
// API's HTTP plumbing), with the shipped defaults (in-flight account on),
// two DCs holding prefixes of the prompts and sending a load window every
// second. The prompts are distinct (cycling over 1,024), the two endpoints
// alternate which goes first, and it reports each one's p50 and p99 and
// the ratios route/match; "inflight=off" is the same without the account,
// for its cost. Run:
//
//	go test -run '^$' -bench RouteVsMatch -benchtime 20000x ./pkg/follow
func BenchmarkRouteVsMatch(b *testing.B) {
	for _, off := range []bool{false, true} {
		name := "inflight=on"
		if off {
			name = "inflight=off"
		}
		b.Run(name, func(b *testing.B) { benchRouteVsMatch(b, off) })
	}
}

func benchRouteVsMatch(b *testing.B, inflightOff bool) {
	e := newEnv(b)
	relay := func(dc string) *fakeRelay {
		r := newFakeRelay(b, e.js, testDomain, dc, 1<<20)
		r.register()
		r.takeEpoch()
		return r
	}
	ra, rb := relay("dc-a"), relay("dc-b")
	w := newWorkload(77, 1024, 64)
	feed(ra, w, func(i int) int { return i % 65 })
	feed(rb, w, func(i int) int { return (i * 7) % 65 })
	cfg := testConfig(b)
	cfg.LaneStaleAfter = time.Hour
	cfg.Route.Inflight.Off = inflightOff
	s := startService(b, e.nc, e.js, cfg)
	waitInstalled(b, s.Service, ra.lane, ra.epoch(), ra.pub.LastSequence())
	waitInstalled(b, s.Service, rb.lane, rb.epoch(), rb.pub.LastSequence())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	windows := make(chan struct{})
	go func() { // the relays' load windows, every second
		defer close(windows)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for seq := uint64(1); ; seq++ {
			for _, r := range []*fakeRelay{ra, rb} {
				p := prefillWindow(r, seq, 4096)
				buf, err := wire.AppendPoolLoad(nil, &p)
				subj, _ := wire.PoolLoadSubject(testDomain, r.dc)
				if err == nil {
					_ = e.nc.Publish(subj, buf)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	bodies := make([][]byte, len(w.chains))
	for i, c := range w.chains {
		var buf bytes.Buffer
		buf.WriteString(`{"local_hashes":[`)
		for j, l := range c {
			if j > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.FormatUint(uint64(l), 10))
		}
		buf.WriteString(`]}`)
		bodies[i] = buf.Bytes()
	}
	// serve is the query API's work on one request without its HTTP
	// plumbing (internal/queryapi): decode the body, answer, encode.
	var out []byte
	serve := func(path string, body []byte) time.Duration {
		start := time.Now()
		var err error
		if path == "/v1/match" {
			var q api.Query
			if q, err = api.DecodeMatchBody(body); err == nil {
				var resp api.MatchResponse
				resp, err = s.Match(q)
				out = resp.AppendJSON(out[:0])
			}
		} else {
			var q api.Query
			var o api.RouteOptions
			if q, o, err = api.DecodeRouteBody(body); err == nil {
				var resp api.RouteResponse
				resp, err = s.Route(q, o)
				out = resp.AppendJSON(out[:0])
			}
		}
		d := time.Since(start)
		if err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		return d
	}
	var match, routeT []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		body := bodies[i%len(bodies)]
		if i%2 == 0 {
			match = append(match, serve("/v1/match", body))
			routeT = append(routeT, serve("/v1/route", body))
		} else {
			routeT = append(routeT, serve("/v1/route", body))
			match = append(match, serve("/v1/match", body))
		}
	}
	b.StopTimer()
	cancel()
	<-windows
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Nanoseconds()) / 1e3
	}
	m50, m99, r50, r99 := p(match, .5), p(match, .99), p(routeT, .5), p(routeT, .99)
	b.ReportMetric(m50, "match-p50-µs")
	b.ReportMetric(m99, "match-p99-µs")
	b.ReportMetric(r50, "route-p50-µs")
	b.ReportMetric(r99, "route-p99-µs")
	b.ReportMetric(r50/m50, "route/match-p50")
	b.ReportMetric(r99/m99, "route/match-p99")
	if inflightOff {
		return
	}
	if st := s.ledger.Stats(); st.Added == 0 {
		b.Fatalf("no route was accounted: %+v", st)
	}
}

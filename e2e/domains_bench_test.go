package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/domains"
	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// Many domains in one indexer, measured:
//
//	go test -run '^$' -bench 'DomainsColdMatch' -benchtime 3000x -timeout 30m ./e2e
//
// Three indexers are built in one process, with 1, 8 and 32 domains × 4
// DCs: per indexer, one pools.Manager per DC runs the N pools (one relay
// each), every pool stores the same 256 chains of 128 blocks of its
// domain, one domains.Registry serves them all; the relays then stop (the
// lanes stay installed). RSS is read after a GC before and after each
// indexer is built. A query is one chain of a random domain (distinct
// inputs) after the caches were evicted by walking 64 MiB; the three
// indexers are queried in turn, b.N/3 queries each, so a load that comes
// and goes on the machine falls on all three alike. p50/p99 are of Match
// alone; the ratios are to the one-domain indexer.

const (
	dmDCs     = 4
	dmChains  = 256
	dmBlocks  = 128
	dmExpect  = 1 << 18 // 2^17 buckets: a 16 MiB table per domain
	dmEvictMB = 64
)

// dmEnv is one indexer of n domains.
type dmEnv struct {
	n          int
	names      []string
	reg        *domains.Registry
	rssDelta   uint64
	hugeDelta  uint64
	tableBytes uint64
	lat        []time.Duration
}

// The indexers are built by the parent benchmark (which testing runs once)
// and measured by its one sub-benchmark, which runs with the real b.N.
func BenchmarkDomainsColdMatch(b *testing.B) {
	var envs []*dmEnv
	for _, n := range []int{1, 8, 32} {
		envs = append(envs, buildDomains(b, n))
	}
	b.Run("interleaved", func(b *testing.B) { domainsColdMatch(b, envs) })
}

func domainsColdMatch(b *testing.B, envs []*dmEnv) {
	for _, e := range envs {
		e.lat = e.lat[:0]
	}
	evict := make([]byte, dmEvictMB<<20)
	rng := rand.New(rand.NewPCG(1, 7))
	sink := byte(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		e := envs[i%len(envs)]
		d := rng.IntN(e.n)
		q := api.Query{Locals: dmChain(d, rng.IntN(dmChains)), Model: e.names[d]}
		b.StopTimer()
		for j := 0; j < len(evict); j += 64 {
			evict[j]++
			sink ^= evict[j]
		}
		b.StartTimer()
		t0 := time.Now()
		resp, err := e.reg.Match(q)
		e.lat = append(e.lat, time.Since(t0))
		if err != nil || resp.Best == nil || resp.Best.Depth != dmBlocks {
			b.Fatalf("query %d: %+v %v", i, resp, err)
		}
	}
	b.StopTimer()
	_ = sink
	if b.N < len(envs) {
		return
	}
	var p50one, p99one time.Duration
	for _, e := range envs {
		slices.Sort(e.lat)
		p50, p99 := e.lat[len(e.lat)/2], e.lat[len(e.lat)*99/100]
		if e.n == 1 {
			p50one, p99one = p50, p99
		}
		sfx := "_" + strconv.Itoa(e.n) + "dom"
		b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50_us"+sfx)
		b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99_us"+sfx)
		b.ReportMetric(float64(p50)/float64(p50one), "p50_ratio"+sfx)
		b.ReportMetric(float64(p99)/float64(p99one), "p99_ratio"+sfx)
		b.ReportMetric(float64(e.rssDelta)/(1<<20), "rss_MiB"+sfx)
		b.ReportMetric(float64(e.tableBytes)/(1<<20), "table_MiB"+sfx)
		b.ReportMetric(float64(e.hugeDelta)/(1<<20), "hugepage_MiB"+sfx)
	}
}

func rss() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	buf, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(buf))
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// anonHuge is the process's memory in transparent huge pages
// (/proc/self/smaps_rollup AnonHugePages): a cold query's cost depends on
// whether its table is in huge pages (one TLB entry per 2 MiB).
func anonHuge() uint64 {
	buf, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(buf), "\n") {
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func dmChain(domain, i int) []ckf.LocalBlockHash {
	c := make([]ckf.LocalBlockHash, dmBlocks)
	x := uint64(domain)<<32 | uint64(i)
	for j := range c {
		x = x*0x9E3779B97F4A7C15 + 0xD1B54A32D192ED03
		c[j] = ckf.LocalBlockHash(x ^ (x >> 29) | 1)
	}
	return c
}

// buildDomains builds an indexer of n domains × dmDCs, loaded, its relays
// stopped; it runs until the benchmark ends.
func buildDomains(b *testing.B, n int) *dmEnv {
	before, hugeBefore := rss(), anonHuge()
	srv := testenv.StartServer(b)
	nc := srv.Connect(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	reg, err := domains.New(nc, js, domains.Config{Discover: true, MaxDomains: n, Logger: zerolog.Nop(), Base: indexer.Config{
		Pool: pc, Logger: zerolog.Nop(), LaneStaleAfter: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })

	e := &dmEnv{n: n, reg: reg, names: make([]string, n)}
	specs := make([]pools.PoolSpec, n)
	for d := range n {
		e.names[d] = fmt.Sprintf("model-%02d", d)
		specs[d] = pools.PoolSpec{Domain: e.names[d]}
	}
	var managers []context.CancelFunc
	var mdone []chan error
	for dc := range dmDCs {
		rc := relay.DefaultConfig("default", fmt.Sprintf("dc-%d", dc))
		rc.Instance = rc.DC
		rc.CKF = ckf.NewConfig(dmExpect)
		rc.CheckpointInterval = 0
		m, err := pools.New(srv.Connect(b), js, pools.Config{Base: rc, File: pools.File{Pools: specs}, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		mctx, mcancel := context.WithCancel(context.Background())
		ch := make(chan error, 1)
		go func() { ch <- m.Run(mctx) }()
		managers, mdone = append(managers, mcancel), append(mdone, ch)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer pcancel()
	for d := range n {
		for dc := range dmDCs {
			subj, err := wire.WorkerEventsSubject(e.names[d], fmt.Sprintf("dc-%d", dc), 1)
			if err != nil {
				b.Fatal(err)
			}
			for i := range dmChains {
				var sb strings.Builder
				for j, h := range dmChain(d, i) {
					if j > 0 {
						sb.WriteByte(',')
					}
					fmt.Fprintf(&sb, `{"block_hash":%d,"tokens_hash":%d}`, uint64(h), uint64(h))
				}
				msg := fmt.Sprintf(`{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[%s]}}}}`, i+1, sb.String())
				if _, err := js.PublishAsync(subj, []byte(msg)); err != nil {
					b.Fatal(err)
				}
				if i%256 == 255 {
					<-js.PublishAsyncComplete()
				}
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-pctx.Done():
		b.Fatal("publishing timed out")
	}
	// Every domain answers its last chain at full depth in every DC.
	for d := range n {
		for {
			resp, err := reg.Match(api.Query{Locals: dmChain(d, dmChains-1), Model: e.names[d]})
			if err == nil && len(resp.Lanes) == dmDCs && !slices.ContainsFunc(resp.Lanes, func(l api.LaneDepth) bool { return l.Depth != dmBlocks }) {
				break
			}
			if pctx.Err() != nil {
				b.Fatalf("%s never complete: %+v %v", e.names[d], resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, c := range managers {
		c()
		<-mdone[i]
	}
	e.rssDelta, e.tableBytes = rss()-before, reg.TableBytes()
	e.hugeDelta = anonHuge() - min(hugeBefore, anonHuge())
	return e
}

// One relay process at 1 and 16 pools: process CPU (user + system, the
// embedded nats-server included) per worker event, for the same events
// spread over the pools:
//
//	go test -run '^$' -bench 'RelayPoolsCPU' -benchtime 20000x ./e2e
func BenchmarkRelayPoolsCPU(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { relayPoolsCPU(b, n) })
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func relayPoolsCPU(b *testing.B, n int) {
	srv := testenv.StartServer(b)
	nc := srv.Connect(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	specs := make([]pools.PoolSpec, n)
	for d := range n {
		specs[d] = pools.PoolSpec{Domain: fmt.Sprintf("model-%02d", d)}
	}
	rc := relay.DefaultConfig("default", "dc-0")
	rc.Instance = "bench"
	rc.CKF = ckf.NewConfig(1 << 18)
	m, err := pools.New(srv.Connect(b), js, pools.Config{Base: rc, File: pools.File{Pools: specs}, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	for _, st := range waitStatuses(b, m, func(st relay.Status) bool { return st.State == relay.StateActive }) {
		_ = st
	}
	msgs := make([][]byte, b.N)
	subjs := make([]string, b.N)
	for i := range b.N {
		c := dmChain(i%n, i)[:16]
		var sb strings.Builder
		for j, h := range c {
			if j > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"block_hash":%d,"tokens_hash":%d}`, uint64(h), uint64(h))
		}
		msgs[i] = fmt.Appendf(nil, `{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[%s]}}}}`, i+1, sb.String())
		subjs[i], _ = wire.WorkerEventsSubject(specs[i%n].Domain, "dc-0", 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0, t0 := cpuTime(), time.Now()
	for i := range b.N {
		if _, err := js.PublishAsync(subjs[i], msgs[i]); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	waitStatuses(b, m, nil)
	var events uint64
	for {
		events = 0
		for _, st := range m.Statuses() {
			events += st.Events
		}
		if events >= uint64(b.N) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cpu, wall := cpuTime()-c0, time.Since(t0)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "cpu_us/event")
	b.ReportMetric(float64(b.N)/wall.Seconds(), "events/s")
}

// waitStatuses waits until every pool's status passes ok (nil: none).
func waitStatuses(b *testing.B, m *pools.Manager, ok func(relay.Status) bool) []relay.Status {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sts := m.Statuses()
		if ok == nil || !slices.ContainsFunc(sts, func(st relay.Status) bool { return !ok(st) }) {
			return sts
		}
		if time.Now().After(deadline) {
			b.Fatalf("pools not ready: %+v", sts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

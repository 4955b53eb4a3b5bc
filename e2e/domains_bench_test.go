package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// Many domains in one indexer, measured:
//
//	go test -run '^$' -bench 'DomainsColdMatch' -benchtime 6000x -timeout 30m ./e2e
//
// Each indexer is its own process, as in production: the benchmark
// re-executes its test binary once per configuration (1, 8 and 32 domains
// × 4 DCs), and each child runs one domains.Registry and nothing else, so
// its resident set and its caches hold that indexer alone. The relays (one
// pools.Manager per DC running a pool per domain) and the nats-server run
// in the parent; every pool stores the same 256 chains of 128 blocks of its
// domain, then the relays stop (the lanes stay installed). RSS is read in
// the child after a GC, before the registry is built and after every domain
// answers at full depth. A query is one chain of a random domain, named by
// its model (distinct inputs), after the child walked an eviction buffer
// of twice the last-level cache (evictBytes: measured from sysfs, or
// declared with CKF_DM_LLC_MB; at least 64 MiB), so the cold state does
// not depend on the machine's cache size; the parent asks the children in turn for dmBatch queries each, so
// a load that comes and goes on the machine falls on all of them alike.
// p50/p99 are of Registry.Match alone; the ratios are to the one-domain
// process.

const (
	dmDCs    = 4
	dmChains = 256
	dmBlocks = 128
	dmExpect = 1 << 18 // 2^17 buckets: a 16 MiB table per domain
	// dmEvictMinMB is the least eviction walk (evictBytes).
	dmEvictMinMB = 64
	// dmLLCDeclaredMB is the last-level cache assumed when the machine
	// reports none and CKF_DM_LLC_MB declares none (an EPYC CCX's L3).
	dmLLCDeclaredMB = 32
	dmBatch         = 25
	// dmChildEnv selects the child's role (TestDomainsBenchChild).
	dmChildEnv = "CKF_DOMAINS_BENCH_CHILD"
)

// dmChild is one indexer process of n domains.
type dmChild struct {
	n     int
	names []string
	cmd   *exec.Cmd
	in    *bufio.Writer
	out   *bufio.Scanner
	// Reported by the child once loaded.
	rssBase, rssLoaded, tableBytes, huge, evict, idleCPU uint64
	lat                                                  []time.Duration
}

// The children are built by the parent benchmark (which testing runs once)
// and measured by its one sub-benchmark, which runs with the real b.N.
func BenchmarkDomainsColdMatch(b *testing.B) {
	srv := testenv.StartServer(b)
	var kids []*dmChild
	for _, n := range []int{1, 8, 32} {
		kids = append(kids, startDomainsChild(b, srv, n))
	}
	b.Run("interleaved", func(b *testing.B) { domainsColdMatch(b, kids) })
}

func domainsColdMatch(b *testing.B, kids []*dmChild) {
	for _, k := range kids {
		k.lat = k.lat[:0]
	}
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		k := kids[round%len(kids)]
		n := min(dmBatch, b.N-done)
		fmt.Fprintf(k.in, "q %d %d\n", n, round)
		if err := k.in.Flush(); err != nil {
			b.Fatal(err)
		}
		if !k.out.Scan() {
			b.Fatalf("child %d: %v", k.n, k.out.Err())
		}
		f := strings.Fields(k.out.Text())
		if len(f) != n+1 || f[0] != "lat" {
			b.Fatalf("child %d answered %q", k.n, k.out.Text())
		}
		for _, v := range f[1:] {
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			k.lat = append(k.lat, time.Duration(ns))
		}
		done += n
	}
	b.StopTimer()
	if slices.ContainsFunc(kids, func(k *dmChild) bool { return len(k.lat) == 0 }) {
		return
	}
	var p50one, p99one time.Duration
	for _, k := range kids {
		slices.Sort(k.lat)
		p50, p99 := k.lat[len(k.lat)/2], k.lat[len(k.lat)*99/100]
		if k.n == 1 {
			p50one, p99one = p50, p99
		}
		sfx := "_" + strconv.Itoa(k.n) + "dom"
		b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50_us"+sfx)
		b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99_us"+sfx)
		b.ReportMetric(float64(p50)/float64(p50one), "p50_ratio"+sfx)
		b.ReportMetric(float64(p99)/float64(p99one), "p99_ratio"+sfx)
		b.ReportMetric(float64(k.rssLoaded-k.rssBase)/(1<<20), "rss_MiB"+sfx)
		b.ReportMetric(float64(k.tableBytes)/(1<<20), "table_MiB"+sfx)
		// What the process holds beside its tables: constant in n when
		// the resident set is the tables plus a fixed overhead.
		b.ReportMetric((float64(k.rssLoaded-k.rssBase)-float64(k.tableBytes))/(1<<20), "other_MiB"+sfx)
		b.ReportMetric(float64(k.huge)/(1<<20), "hugepage_MiB"+sfx)
		b.ReportMetric(float64(k.evict)/(1<<20), "evict_MiB"+sfx)
		b.ReportMetric(float64(k.idleCPU)/1e3, "idle_cpu_ms/s"+sfx)
	}
}

// startDomainsChild starts the indexer process of n domains, loads its
// domains from relays run here, waits until it answers them all and stops
// the relays.
func startDomainsChild(b *testing.B, srv *testenv.Server, n int) *dmChild {
	k := &dmChild{n: n, names: make([]string, n)}
	for d := range n {
		k.names[d] = fmt.Sprintf("n%d-model-%02d", n, d)
	}
	k.cmd = exec.Command(os.Args[0], "-test.run", "^TestDomainsBenchChild$", "-test.v")
	k.cmd.Env = append(os.Environ(), dmChildEnv+"=1", "CKF_DM_URL="+srv.URL(), "CKF_DM_DOMAINS="+strings.Join(k.names, ","))
	k.cmd.Stderr = os.Stderr
	stdin, err := k.cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := k.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := k.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	k.in, k.out = bufio.NewWriter(stdin), bufio.NewScanner(stdout)
	k.out.Buffer(make([]byte, 1<<20), 1<<20)
	// The child's end is a check too: its goroutine leak check
	// (TestMain) or a failed query fails the benchmark. What it prints
	// after the protocol is read to the end before Wait.
	b.Cleanup(func() {
		stdin.Close()
		var rest strings.Builder
		for k.out.Scan() {
			rest.WriteString(k.out.Text() + "\n")
		}
		if err := k.cmd.Wait(); err != nil {
			b.Errorf("indexer process of %d domains: %v\n%s", n, err, rest.String())
		}
	})
	// expect reads the child's protocol lines, skipping what -test.v
	// prints, up to the one starting with word.
	expect := func(word string) []string {
		for k.out.Scan() {
			if f := strings.Fields(k.out.Text()); len(f) > 0 && f[0] == word {
				return f
			}
		}
		b.Fatalf("child %d ended before %q: %v", n, word, k.out.Err())
		return nil
	}
	expect("started")
	js, err := jetstream.New(srv.Connect(b))
	if err != nil {
		b.Fatal(err)
	}
	specs := make([]pools.PoolSpec, n)
	for d := range n {
		specs[d] = pools.PoolSpec{Domain: k.names[d]}
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
	for d := range n {
		for dc := range dmDCs {
			subj, err := wire.WorkerEventsSubject(k.names[d], fmt.Sprintf("dc-%d", dc), 1)
			if err != nil {
				b.Fatal(err)
			}
			for i := range dmChains {
				if _, err := js.PublishAsync(subj, dmStoredEvent(i+1, dmChain(d, i))); err != nil {
					b.Fatal(err)
				}
				if i%256 == 255 {
					<-js.PublishAsyncComplete()
				}
			}
		}
	}
	<-js.PublishAsyncComplete()
	f := expect("ready")
	for i, p := range []*uint64{&k.rssBase, &k.rssLoaded, &k.tableBytes, &k.huge, &k.evict, &k.idleCPU} {
		if *p, err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			b.Fatalf("child %d: ready line %q: %v", n, k.out.Text(), err)
		}
	}
	for i, c := range managers {
		c()
		<-mdone[i]
	}
	return k
}

// dmStoredEvent is a worker's stored event of chain (JSON, as the engine
// bridge publishes it).
func dmStoredEvent(id int, chain []ckf.LocalBlockHash) []byte {
	var sb strings.Builder
	for j, h := range chain {
		if j > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"block_hash":%d,"tokens_hash":%d}`, uint64(h), uint64(h))
	}
	return fmt.Appendf(nil, `{"worker_id":1,"event":{"event_id":%d,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[%s]}}}}`, id, sb.String())
}

// TestDomainsBenchChild is the indexer process of BenchmarkDomainsColdMatch;
// it does nothing unless that benchmark started it. Its protocol, one line
// each way on stdin/stdout: it prints "started" once its registry runs and
// "ready RSS_BASE RSS_LOADED TABLE_BYTES HUGE_BYTES EVICT_BYTES IDLE_CPU_US"
// (IDLE_CPU_US: its CPU over one idle second) once every domain
// answers its last chain at full depth in every DC; then each "q N SEED"
// gets "lat NS..." (N cold queries) until stdin closes.
func TestDomainsBenchChild(t *testing.T) {
	if os.Getenv(dmChildEnv) == "" {
		t.Skip("the indexer process of BenchmarkDomainsColdMatch; runs only under it")
	}
	names := strings.Split(os.Getenv("CKF_DM_DOMAINS"), ",")
	base := rss()
	nc, err := nats.Connect(os.Getenv("CKF_DM_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pc := consumer.DefaultPoolConfig()
	pc.MaxDirtyToAppliedAge = time.Minute
	reg, err := domains.New(nc, js, domains.Config{Domains: names, MaxDomains: len(names), Logger: zerolog.Nop(), Base: follow.Config{
		Pool: pc, Logger: zerolog.Nop(), LaneStaleAfter: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- reg.Run(ctx) }()
	defer func() { cancel(); <-done }()
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		if err := out.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	say("started")
	deadline := time.Now().Add(10 * time.Minute)
	for d, name := range names {
		for {
			resp, err := reg.Match(api.Query{Locals: dmChain(d, dmChains-1), Model: name})
			if err == nil && len(resp.Lanes) == dmDCs && !slices.ContainsFunc(resp.Lanes, func(l api.LaneDepth) bool { return l.Depth != dmBlocks }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never complete: %+v %v", name, resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The process's own CPU while no query runs: what its domains' idle
	// lanes (state polls, stale checks, watches) cost, and what may run
	// beside a query on the same cores.
	c0 := cpuTime()
	time.Sleep(time.Second)
	idle := cpuTime() - c0
	say("ready %d %d %d %d %d %d", base, rss(), reg.TableBytes(), anonHuge(), evictBytes(), idle.Microseconds())
	evict := make([]byte, evictBytes())
	sink := byte(0)
	in := bufio.NewScanner(os.Stdin)
	var line []byte
	for in.Scan() {
		var n int
		var seed uint64
		if _, err := fmt.Sscanf(in.Text(), "q %d %d", &n, &seed); err != nil {
			t.Fatalf("command %q: %v", in.Text(), err)
		}
		rng := rand.New(rand.NewPCG(seed, uint64(len(names))))
		line = append(line[:0], "lat"...)
		for range n {
			d := rng.IntN(len(names))
			q := api.Query{Locals: dmChain(d, rng.IntN(dmChains)), Model: names[d]}
			for j := 0; j < len(evict); j += 64 {
				evict[j]++
				sink ^= evict[j]
			}
			t0 := time.Now()
			resp, err := reg.Match(q)
			el := time.Since(t0)
			if err != nil || resp.Best == nil || resp.Best.Depth != dmBlocks {
				t.Fatalf("query: %+v %v", resp, err)
			}
			line = append(line, ' ')
			line = strconv.AppendInt(line, el.Nanoseconds(), 10)
		}
		say("%s", line)
	}
	_ = sink
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
		msgs[i] = dmStoredEvent(i+1, dmChain(i%n, i)[:16])
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

// llcBytes is the largest CPU cache sysfs reports for cpu0, else the one
// CKF_DM_LLC_MB declares, else dmLLCDeclaredMB.
func llcBytes() uint64 {
	var most uint64
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	for _, d := range dirs {
		buf, err := os.ReadFile(filepath.Join(d, "size"))
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(buf))
		mult := uint64(1)
		switch {
		case strings.HasSuffix(v, "K"):
			mult, v = 1<<10, strings.TrimSuffix(v, "K")
		case strings.HasSuffix(v, "M"):
			mult, v = 1<<20, strings.TrimSuffix(v, "M")
		}
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			most = max(most, n*mult)
		}
	}
	if most != 0 {
		return most
	}
	if mb, err := strconv.ParseUint(os.Getenv("CKF_DM_LLC_MB"), 10, 64); err == nil && mb > 0 {
		return mb << 20
	}
	return dmLLCDeclaredMB << 20
}

// evictBytes is the cold-state walk: twice the last-level cache, at least
// dmEvictMinMB.
func evictBytes() uint64 { return max(2*llcBytes(), dmEvictMinMB<<20) }

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

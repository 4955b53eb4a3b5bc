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
// domain (CKF_DM_CHAINS sets another number), then the relays stop (the
// lanes stay installed). RSS is read in the child after a GC, before the
// registry is built and after every domain answers at full depth.
//
// A query is one stored chain (distinct inputs from a seeded generator),
// named by its model, after the child walked an eviction buffer of twice
// the last-level cache (evictBytes). A cache that keeps reused lines
// against a scan keeps part of a small working set through any walk, so
// how cold a query is depends on the machine's cache; the benchmark takes
// that out of the comparison with a traffic dimension instead. Every
// n-domain process answers two traffics:
//   - one-domain traffic: every query names the same domain of the n, so
//     the tables' working set is the one-domain process's and only the
//     registry differs (n domains to look up among, their idle work);
//   - mixed traffic: queries spread evenly over the n domains, so the
//     working set is n times larger.
//
// p50(n, one-domain)/p50(1) is the registry's own share, on any machine;
// p50(n, mixed)/p50(n, one-domain) the memory system's, which the table
// lines a query reads (hot_MiB) against the cache explain, and the child's
// LLC and dTLB miss counters when the machine has them. The parent asks
// the (process, traffic) pairs in turn for dmBatch queries each, so a load
// that comes and goes falls on all of them alike. p50/p99 are of
// Registry.Match alone.

const (
	dmDCs = 4
	// dmChainsDefault is the chains each pool stores, unless
	// CKF_DM_CHAINS sets 1 to dmExpect/dmBlocks (the blocks the tables are
	// sized for): more chains, a larger working set per domain.
	dmChainsDefault = 256
	dmBlocks        = 128
	dmExpect        = 1 << 18 // 2^17 buckets: a 16 MiB table per domain
	// dmProbedPositions is how many of a chain's positions a query of a
	// chain every lane holds at full depth reads, each in its two
	// candidate buckets (spec §11 with verification window 2 and the
	// search's two-level subtree prefetch, for 128 blocks): position 0,
	// the exponential phase's 1, 2, 4, ..., 64, the binary phase's 96,
	// 112, 120, 124, 126, 127 and the three midpoints it prefetches in
	// vain (80, 116, 125); the window's 126 and 127 are among them.
	dmProbedPositions = 17
	// dmEvictMinMB is the least eviction walk (evictBytes).
	dmEvictMinMB = 64
	// dmLLCDeclaredMB is the last-level cache assumed when the machine
	// reports none and CKF_DM_LLC_MB declares none (an EPYC CCX's L3).
	dmLLCDeclaredMB = 32
	dmBatch         = 25
	// dmChildEnv selects the child's role (TestDomainsBenchChild).
	dmChildEnv = "CKF_DOMAINS_BENCH_CHILD"
)

// dmTraffic is the domains a child's queries name.
type dmTraffic string

const (
	// dmOne names domain 0 of the child's n in every query.
	dmOne dmTraffic = "one"
	// dmMixed names a uniformly random domain of the n.
	dmMixed dmTraffic = "mixed"
)

// pick draws a query's domain of n and its chain of chains.
func (t dmTraffic) pick(rng *rand.Rand, n, chains int) (domain, chain int) {
	if t == dmMixed {
		domain = rng.IntN(n)
	}
	return domain, rng.IntN(chains)
}

// dmChainCount is the chains each pool stores (CKF_DM_CHAINS, else
// dmChainsDefault).
func dmChainCount() (int, error) {
	v := os.Getenv("CKF_DM_CHAINS")
	if v == "" {
		return dmChainsDefault, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("CKF_DM_CHAINS: %w", err)
	}
	if n < 1 || n > dmExpect/dmBlocks {
		return 0, fmt.Errorf("CKF_DM_CHAINS=%d: want 1 to %d (the blocks the tables are sized for)", n, dmExpect/dmBlocks)
	}
	return n, nil
}

// dmChild is one indexer process of n domains.
type dmChild struct {
	n, chains int
	names     []string
	cmd       *exec.Cmd
	in        *bufio.Writer
	out       *bufio.Scanner
	// Reported by the child once loaded. linesPerBucket is the 64-byte
	// lines of a bucket's row its lanes' words span.
	rssBase, rssLoaded, tableBytes, huge, evict, idleCPU, linesPerBucket uint64
}

// dmRun is one (process, traffic) pair and what its queries measured.
type dmRun struct {
	kid     *dmChild
	traffic dmTraffic
	lat     []time.Duration
	// llcMiss and dtlbMiss are the child's counts over Match alone; counted
	// is false when the machine gives no counters.
	llcMiss, dtlbMiss uint64
	counted           bool
}

// The children are built by the parent benchmark (which testing runs once)
// and measured by its one sub-benchmark, which runs with the real b.N.
func BenchmarkDomainsColdMatch(b *testing.B) {
	chains, err := dmChainCount()
	if err != nil {
		b.Fatal(err)
	}
	srv := testenv.StartServer(b)
	var runs []*dmRun
	for _, n := range []int{1, 8, 32} {
		k := startDomainsChild(b, srv, n, chains)
		if n == 1 {
			// One domain's two traffics are the same queries.
			runs = append(runs, &dmRun{kid: k, traffic: dmOne})
			continue
		}
		runs = append(runs, &dmRun{kid: k, traffic: dmOne}, &dmRun{kid: k, traffic: dmMixed})
	}
	b.Run("interleaved", func(b *testing.B) { domainsColdMatch(b, runs) })
}

func domainsColdMatch(b *testing.B, runs []*dmRun) {
	for _, r := range runs {
		r.lat, r.llcMiss, r.dtlbMiss = r.lat[:0], 0, 0
	}
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		r := runs[round%len(runs)]
		n := min(dmBatch, b.N-done)
		fmt.Fprintf(r.kid.in, "q %d %d %s\n", n, round, r.traffic)
		if err := r.kid.in.Flush(); err != nil {
			b.Fatal(err)
		}
		if !r.kid.out.Scan() {
			b.Fatalf("child %d: %v", r.kid.n, r.kid.out.Err())
		}
		if err := r.add(r.kid.out.Text(), n); err != nil {
			b.Fatalf("child %d: %v", r.kid.n, err)
		}
		done += n
	}
	b.StopTimer()
	if slices.ContainsFunc(runs, func(r *dmRun) bool { return len(r.lat) == 0 }) {
		return
	}
	if !runs[0].counted {
		b.Log("no LLC or dTLB miss counters on this machine (see the children's stderr): hot_MiB is the arithmetic")
	}
	for _, m := range dmSummary(runs) {
		b.ReportMetric(m.v, m.unit)
	}
}

// add records a child's answer to a batch of n: "lat LLC DTLB NS...", the
// counts -1 when the child has no counters.
func (r *dmRun) add(line string, n int) error {
	f := strings.Fields(line)
	if len(f) != n+3 || f[0] != "lat" {
		return fmt.Errorf("answered %q to a batch of %d", line, n)
	}
	var v [2]int64
	for i := range v {
		var err error
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return fmt.Errorf("answer %q: %w", line, err)
		}
	}
	if r.counted = v[0] >= 0 && v[1] >= 0; r.counted {
		r.llcMiss += uint64(v[0])
		r.dtlbMiss += uint64(v[1])
	}
	for _, s := range f[3:] {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ns < 0 {
			return fmt.Errorf("answer %q: latency %q", line, s)
		}
		r.lat = append(r.lat, time.Duration(ns))
	}
	return nil
}

// dmMetric is one reported figure.
type dmMetric struct {
	unit string
	v    float64
}

// dmSummary turns the runs into the benchmark's metrics. Runs are of
// distinct (process, traffic) pairs, the one-domain process first, each
// with latencies. The latencies are sorted in place.
func dmSummary(runs []*dmRun) []dmMetric {
	var out []dmMetric
	put := func(unit string, v float64) { out = append(out, dmMetric{unit, v}) }
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	mib := func(v uint64) float64 { return float64(v) / (1 << 20) }
	pct := func(r *dmRun, p int) time.Duration { return r.lat[len(r.lat)*p/100] }
	one := make(map[int]*dmRun) // each process's one-domain traffic
	for _, r := range runs {
		slices.Sort(r.lat)
		if r.traffic == dmOne {
			one[r.kid.n] = r
		}
	}
	base := runs[0]
	put("evict_MiB", mib(base.kid.evict))
	for _, r := range runs {
		k := r.kid
		sfx := "_" + strconv.Itoa(k.n) + "dom"
		if r.traffic == dmOne {
			// What the process holds: the same whatever the traffic.
			put("rss_MiB"+sfx, mib(k.rssLoaded-k.rssBase))
			put("table_MiB"+sfx, mib(k.tableBytes))
			// Beside its tables: constant in n when the resident set
			// is the tables plus a fixed overhead.
			put("other_MiB"+sfx, (float64(k.rssLoaded-k.rssBase)-float64(k.tableBytes))/(1<<20))
			put("hugepage_MiB"+sfx, mib(k.huge))
			put("idle_cpu_ms/s"+sfx, float64(k.idleCPU)/1e3)
		}
		if k.n != 1 {
			sfx += "_" + string(r.traffic)
		}
		p50, p99 := pct(r, 50), pct(r, 99)
		put("p50_us"+sfx, us(p50))
		put("p99_us"+sfx, us(p99))
		// The table lines the traffic's queries read, over all its
		// domains' chains: the working set the cache has to hold.
		domains := uint64(1)
		if r.traffic == dmMixed {
			domains = uint64(k.n)
		}
		put("hot_MiB"+sfx, mib(domains*uint64(k.chains)*dmProbedPositions*2*k.linesPerBucket*64))
		if r.counted {
			put("llc_miss/query"+sfx, float64(r.llcMiss)/float64(len(r.lat)))
			put("dtlb_miss/query"+sfx, float64(r.dtlbMiss)/float64(len(r.lat)))
		}
		if k.n == 1 {
			continue
		}
		if r.traffic == dmOne {
			put("registry_ratio_"+strconv.Itoa(k.n)+"dom", float64(p50)/float64(pct(base, 50)))
			continue
		}
		ref := one[k.n]
		put("memory_ratio_"+strconv.Itoa(k.n)+"dom", float64(p50)/float64(pct(ref, 50)))
		put("p50_ratio_"+strconv.Itoa(k.n)+"dom", float64(p50)/float64(pct(base, 50)))
		put("p99_ratio_"+strconv.Itoa(k.n)+"dom", float64(p99)/float64(pct(base, 99)))
	}
	return out
}

// startDomainsChild starts the indexer process of n domains, loads its
// domains from relays run here, waits until it answers them all and stops
// the relays.
func startDomainsChild(b *testing.B, srv *testenv.Server, n, chains int) *dmChild {
	k := &dmChild{n: n, chains: chains, names: make([]string, n)}
	for d := range n {
		k.names[d] = fmt.Sprintf("n%d-model-%02d", n, d)
	}
	k.cmd = exec.Command(os.Args[0], "-test.run", "^TestDomainsBenchChild$", "-test.v")
	k.cmd.Env = append(os.Environ(), dmChildEnv+"=1", "CKF_DM_URL="+srv.URL(), "CKF_DM_DOMAINS="+strings.Join(k.names, ","),
		"CKF_DM_CHAINS="+strconv.Itoa(chains))
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
			for i := range k.chains {
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
	for i, p := range []*uint64{&k.rssBase, &k.rssLoaded, &k.tableBytes, &k.huge, &k.evict, &k.idleCPU, &k.linesPerBucket} {
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
// "ready RSS_BASE RSS_LOADED TABLE_BYTES HUGE_BYTES EVICT_BYTES IDLE_CPU_US
// LINES_PER_BUCKET" (IDLE_CPU_US: its CPU over one idle second) once every
// domain answers its last chain at full depth in every DC; then each
// "q N SEED TRAFFIC" gets "lat LLC_MISSES DTLB_MISSES NS..." (N cold
// queries; the misses over their Match calls, -1 without counters) until
// stdin closes.
func TestDomainsBenchChild(t *testing.T) {
	if os.Getenv(dmChildEnv) == "" {
		t.Skip("the indexer process of BenchmarkDomainsColdMatch; runs only under it")
	}
	names := strings.Split(os.Getenv("CKF_DM_DOMAINS"), ",")
	chains, err := dmChainCount()
	if err != nil {
		t.Fatal(err)
	}
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
	var lanes []api.LaneDepth
	for d, name := range names {
		for {
			resp, err := reg.Match(api.Query{Locals: dmChain(d, chains-1), Model: name})
			if err == nil && len(resp.Lanes) == dmDCs && !slices.ContainsFunc(resp.Lanes, func(l api.LaneDepth) bool { return l.Depth != dmBlocks }) {
				lanes = resp.Lanes
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
	say("ready %d %d %d %d %d %d %d", base, rss(), reg.TableBytes(), anonHuge(), evictBytes(), idle.Microseconds(), rowLines(lanes))
	// The counters count the thread that opened them: the queries run on
	// it alone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctr, err := openMissCounters()
	if err != nil {
		fmt.Fprintf(os.Stderr, "indexer process of %d domains: no LLC/dTLB miss counters: %v\n", len(names), err)
	} else {
		defer ctr.close()
	}
	evict := make([]byte, evictBytes())
	sink := byte(0)
	in := bufio.NewScanner(os.Stdin)
	var line []byte
	for in.Scan() {
		var n int
		var seed uint64
		var traffic dmTraffic
		if _, err := fmt.Sscanf(in.Text(), "q %d %d %s", &n, &seed, &traffic); err != nil {
			t.Fatalf("command %q: %v", in.Text(), err)
		}
		if n < 1 || n > 1000 || (traffic != dmOne && traffic != dmMixed) {
			t.Fatalf("command %q: want 1 to 1000 queries of traffic %q or %q", in.Text(), dmOne, dmMixed)
		}
		var llc0, dtlb0 uint64
		if ctr != nil {
			if llc0, dtlb0, err = ctr.read(); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(seed, uint64(len(names))))
		lat := make([]time.Duration, 0, n)
		for range n {
			d, c := traffic.pick(rng, len(names), chains)
			q := api.Query{Locals: dmChain(d, c), Model: names[d]}
			for j := 0; j < len(evict); j += 64 {
				evict[j]++
				sink ^= evict[j]
			}
			if ctr != nil {
				if err := ctr.enable(); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			resp, err := reg.Match(q)
			el := time.Since(t0)
			if ctr != nil {
				if err := ctr.disable(); err != nil {
					t.Fatal(err)
				}
			}
			if err != nil || resp.Best == nil || resp.Best.Depth != dmBlocks {
				t.Fatalf("query: %+v %v", resp, err)
			}
			lat = append(lat, el)
		}
		llc, dtlb := int64(-1), int64(-1)
		if ctr != nil {
			l, d, err := ctr.read()
			if err != nil {
				t.Fatal(err)
			}
			llc, dtlb = int64(l-llc0), int64(d-dtlb0)
		}
		line = fmt.Appendf(line[:0], "lat %d %d", llc, dtlb)
		for _, el := range lat {
			line = append(line, ' ')
			line = strconv.AppendInt(line, el.Nanoseconds(), 10)
		}
		say("%s", line)
	}
	_ = sink
}

// rowLines is how many 64-byte lines of a bucket's 128-byte row (16 lanes'
// 8-byte words) the given lanes' words span: the lines a probe of those
// lanes reads per bucket.
func rowLines(lanes []api.LaneDepth) int {
	var lines [2]bool
	for _, l := range lanes {
		lines[(l.Lane*8/64)&1] = true
	}
	n := 0
	for _, used := range lines {
		if used {
			n++
		}
	}
	return n
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

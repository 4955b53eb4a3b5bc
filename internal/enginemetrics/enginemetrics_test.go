package enginemetrics

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/prefillest"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each engine's exposition (in the text format vLLM and SGLang serve) gives
// the load it holds; what it does not serve stays unknown.
func TestParseReadsEachEnginesSeries(t *testing.T) {
	for _, tc := range []struct {
		file      string
		blockSize int
		want      Load
	}{
		// Two engine cores: requests summed, capacity summed, the blocks
		// in use at the mean usage.
		// The prompt length histogram gives the counters (summed over the
		// cores), not prompt_tokens_total.
		{"vllm.prom", 16, Load{Flags: wire.LoadRequests | wire.LoadKV | wire.LoadDecode, Running: 5, Waiting: 5, ActiveDecode: 6000, CapacityBlocks: 16000,
			HasCounters: true, Counters: prefillest.Counters{PromptTokens: 180000, Requests: 60}}},
		// Older vLLM: no cache_config_info, so no capacity and no blocks;
		// the counter pair, finished requests summed over their reasons.
		{"vllm-old.prom", 16, Load{Flags: wire.LoadRequests, Running: 1, Waiting: 4,
			HasCounters: true, Counters: prefillest.Counters{PromptTokens: 51200, Requests: 25}}},
		// SGLang: the token capacity in blocks of the bridge's block size.
		{"sglang.prom", 16, Load{Flags: wire.LoadRequests | wire.LoadKV | wire.LoadDecode, Running: 7, Waiting: 2, ActiveDecode: 5000, CapacityBlocks: 10000,
			HasCounters: true, Counters: prefillest.Counters{PromptTokens: 8128902, Requests: 4000}}},
		// Without a block size its capacity is unknown.
		{"sglang.prom", 0, Load{Flags: wire.LoadRequests, Running: 7, Waiting: 2,
			HasCounters: true, Counters: prefillest.Counters{PromptTokens: 8128902, Requests: 4000}}},
	} {
		got, err := Parse(bytes.NewReader(fixture(t, tc.file)), tc.blockSize)
		if err != nil || got != tc.want {
			t.Fatalf("%s (block size %d): got %+v %v, want %+v", tc.file, tc.blockSize, got, err, tc.want)
		}
	}
}

// Counters are read only as a pair, finite and non-negative.
func TestParseCountersOnlyAsAValidPair(t *testing.T) {
	base := "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\n"
	for body, want := range map[string]bool{
		base + "vllm:prompt_tokens_total 100\n":                                false,
		base + "vllm:prompt_tokens_total 100\nvllm:request_success_total 2\n":  true,
		base + "vllm:prompt_tokens_total -1\nvllm:request_success_total 2\n":   false,
		base + "vllm:prompt_tokens_total +Inf\nvllm:request_success_total 2\n": false,
		base + "vllm:prompt_tokens_total NaN\nvllm:request_success_total 2\n":  false,
		base + "sglang:prompt_tokens_total 10\nsglang:num_requests_total 1\n":  true,
		base + "sglang:prompt_tokens_total 10\nvllm:request_success_total 1\n": false,
	} {
		l, err := Parse(strings.NewReader(body), 16)
		if err != nil || l.HasCounters != want {
			t.Errorf("%q: counters %v (%+v) %v, want %v", body, l.HasCounters, l.Counters, err, want)
		}
	}
	a := Load{HasCounters: true, Counters: prefillest.Counters{PromptTokens: 10, Requests: 1}}
	a.Add(Load{HasCounters: true, Counters: prefillest.Counters{PromptTokens: 5, Requests: 2}})
	if !a.HasCounters || a.Counters != (prefillest.Counters{PromptTokens: 15, Requests: 3}) {
		t.Fatalf("sum %+v", a)
	}
	a.Add(Load{})
	if a.HasCounters {
		t.Fatal("a sum with an engine without counters has counters")
	}
}

func TestParseRefusesWhatIsNotAnEngine(t *testing.T) {
	if _, err := Parse(strings.NewReader("# TYPE go_goroutines gauge\ngo_goroutines 7\n"), 16); !errors.Is(err, ErrNoLoad) {
		t.Fatalf("an endpoint without engine series: %v", err)
	}
	if _, err := Parse(strings.NewReader("vllm:num_requests_running{ 3\n"), 16); err == nil {
		t.Fatal("a broken exposition parsed")
	}
}

// Scrape reads a real HTTP endpoint serving the exposition, and refuses
// an error status and an oversized body.
func TestScrapeReadsAnEngineEndpoint(t *testing.T) {
	body := fixture(t, "vllm.prom")
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(body)
	})
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("# padding\n"), MaxExpositionBytes/10+1))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	got, err := Scrape(context.Background(), srv.Client(), srv.URL+"/metrics", 16)
	if err != nil || got.Running != 5 || got.CapacityBlocks != 16000 {
		t.Fatalf("scrape: %+v %v", got, err)
	}
	for _, p := range []string{"/broken", "/huge"} {
		if _, err := Scrape(context.Background(), srv.Client(), srv.URL+p, 16); err == nil {
			t.Fatalf("%s scraped without error", p)
		}
	}
}

// The exposition is untrusted input: any bytes give a Load or an error,
// never a panic, and a known value never comes without its flag.
func FuzzParse(f *testing.F) {
	for _, n := range []string{"vllm.prom", "vllm-old.prom", "sglang.prom"} {
		f.Add(fixture(f, n))
	}
	f.Add([]byte("vllm:num_requests_running NaN\nvllm:num_requests_waiting -3\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		l, err := Parse(bytes.NewReader(in), 16)
		if err != nil {
			return
		}
		if !l.Flags.Has(wire.LoadRequests) && (l.Running != 0 || l.Waiting != 0) {
			t.Fatalf("requests without their flag: %+v", l)
		}
		if !l.Flags.Has(wire.LoadKV) && (l.CapacityBlocks != 0 || l.ActiveDecode != 0) {
			t.Fatalf("capacity without its flag: %+v", l)
		}
		if l.Flags.Has(wire.LoadKV) && l.ActiveDecode > l.CapacityBlocks {
			t.Fatalf("more blocks in use than capacity: %+v", l)
		}
	})
}

// A value no engine can have (an underflowed counter, NaN, a negative
// gauge, a capacity past the wire's bound) refuses the scrape rather than
// reading as idle or as a load that shuts the engine out; values at the
// bounds are read.
func TestParseRefusesValuesOutOfRange(t *testing.T) {
	reqs := func(running, waiting string) string {
		return "vllm:num_requests_running " + running + "\nvllm:num_requests_waiting " + waiting + "\n"
	}
	vllmKV := func(blocks, usage string) string {
		return reqs("1", "1") + `vllm:cache_config_info{num_gpu_blocks="` + blocks + `"} 1` + "\nvllm:kv_cache_usage_perc " + usage + "\n"
	}
	bound := strconv.FormatUint(wire.MaxLoadRequests, 10)
	for name, in := range map[string]string{
		"negative waiting":          reqs("3", "-1"),
		"NaN running":               reqs("NaN", "0"),
		"infinite waiting":          reqs("1", "+Inf"),
		"underflowed running":       reqs("1.8446744073709552e+19", "0"),
		"running past the bound":    reqs(strconv.FormatUint(wire.MaxLoadRequests+1024, 10), "0"),
		"capacity past the bound":   vllmKV(strconv.FormatUint(wire.MaxLoadBlocks+1, 10), "0.5"),
		"NaN usage":                 vllmKV("100", "NaN"),
		"negative usage":            vllmKV("100", "-0.5"),
		"infinite usage":            vllmKV("100", "+Inf"),
		"sglang capacity too large": "sglang:num_running_reqs 1\nsglang:num_queue_reqs 1\nsglang:max_total_num_tokens 1e30\n",
	} {
		if _, err := Parse(strings.NewReader(in), 16); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("%s: %v, want ErrOutOfRange", name, err)
		}
	}
	l, err := Parse(strings.NewReader(reqs(bound, "0")+`vllm:cache_config_info{num_gpu_blocks="`+strconv.FormatUint(wire.MaxLoadBlocks, 10)+`"} 1`+"\nvllm:kv_cache_usage_perc 1.0000001\n"), 16)
	if err != nil || l.Running != wire.MaxLoadRequests || l.CapacityBlocks != wire.MaxLoadBlocks || l.ActiveDecode != wire.MaxLoadBlocks {
		t.Fatalf("at the bounds: %+v %v", l, err)
	}
	// Two cores at the bound: the sum saturates at it.
	two := `vllm:cache_config_info{engine="0",num_gpu_blocks="` + strconv.FormatUint(wire.MaxLoadBlocks, 10) + `"} 1` + "\n" +
		`vllm:cache_config_info{engine="1",num_gpu_blocks="` + strconv.FormatUint(wire.MaxLoadBlocks, 10) + `"} 1` + "\n"
	if _, err := Parse(strings.NewReader(reqs("0", "0")+two), 16); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("two cores past the bound together: %v", err)
	}
	sum := Load{Flags: wire.LoadRequests, Running: wire.MaxLoadRequests - 1, Waiting: 3, ActiveDecode: wire.MaxLoadBlocks, CapacityBlocks: 5}
	sum.Add(Load{Flags: wire.LoadRequests, Running: 7, Waiting: 4, ActiveDecode: 1, CapacityBlocks: 6})
	if sum.Running != wire.MaxLoadRequests || sum.Waiting != 7 || sum.ActiveDecode != wire.MaxLoadBlocks || sum.CapacityBlocks != 11 {
		t.Errorf("Add does not saturate: %+v", sum)
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ckfrelay/ckfrelay/internal/indexer"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/consumer"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/streams"
	"github.com/ckfrelay/ckfrelay/testenv"
)

func TestParseRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dcs", "a,b.c"}, "dc"},
		{[]string{"--domain", ""}, "domain"},
		{[]string{"--speed", "-1"}, "speed"},
		{[]string{"--workers-per-dc", "0"}, "workers"},
		{[]string{"--affinity", "2"}, "affinity"},
		{[]string{"--nats-user", "replayer"}, "--nats-password-file"},
		{[]string{"--nats-tls-cert", "c.pem"}, "--nats-tls-key"},
		{[]string{"--dcs", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q"}, "DCs"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, func(string) string { return "" }, &out, &errb); code != 2 {
			t.Fatalf("%v: exit %d", c.args, code)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Fatalf("%v: %q lacks %q", c.args, errb.String(), c.want)
		}
	}
}

func TestParseReadsTheEnvironment(t *testing.T) {
	o, err := parse(nil, func(k string) string {
		return map[string]string{"CKFRELAY_DCS": "x,y,z", "CKFRELAY_SPEED": "0", "CKFRELAY_REPEAT": "true"}[k]
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.rcfg.DCs) != 3 || o.speed != 0 || !o.repeat {
		t.Fatalf("%+v", o)
	}
}

func TestPerDCPublishersAndNATSQueriesVerifyAMultiDCSite(t *testing.T) {
	topo := testenv.StartHubWithLeaves(t, "dc-a", "dc-b")
	hub := topo.Hub()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	icfg := follow.Config{Domain: "rp", Streams: streams.Options{Memory: true}}
	icfg.Pool = consumer.DefaultPoolConfig()
	icfg.Pool.MaxDirtyToAppliedAge = time.Minute
	ix, err := indexer.New(hub.Connect(t), hub.JetStream(t), icfg)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = ix.Run(ctx) }()
	args := []string{"--nats-url", hub.URL(), "--query-via", "nats", "--domain", "rp", "--speed", "0",
		"--max-requests", "300", "--workers-per-dc", "2", "--verify-timeout", "60s"}
	var urls []string
	for _, dc := range topo.DCs() {
		leaf := topo.Leaf(t, dc)
		nc := leaf.Connect(t)
		hubJS, err := jetstream.NewWithDomain(nc, testenv.HubDomain)
		if err != nil {
			t.Fatal(err)
		}
		cfg := relay.DefaultConfig("rp", dc)
		cfg.CKF = ckf.NewConfig(1 << 15)
		cfg.Streams = streams.Options{Memory: true}
		cfg.InputJS = leaf.JetStream(t)
		r, err := relay.New(nc, hubJS, cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
		urls = append(urls, dc+"="+leaf.URL())
	}
	args = append(args, "--dc-nats-urls", strings.Join(urls, ","))
	var out, errb bytes.Buffer
	if code := run(ctx, args, func(string) string { return "" }, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "no false negative") {
		t.Fatalf("no verification line:\n%s", out.String())
	}
	// Off a terminal the logs and the status lines are plain text.
	if !strings.Contains(errb.String(), "nats connected") || strings.Contains(errb.String()+out.String(), "\x1b[") {
		t.Fatalf("want plain logs off a terminal:\nstdout:\n%q\nstderr:\n%q", out.String(), errb.String())
	}
	// Each DC's events were stored in that DC only.
	for _, dc := range topo.DCs() {
		s, err := topo.Leaf(t, dc).JetStream(t).Stream(ctx, streams.EventStream)
		if err != nil {
			t.Fatal(err)
		}
		for subj := range mustSubjects(t, ctx, s) {
			if !strings.HasPrefix(subj, "kvevents.rp."+dc+".") {
				t.Fatalf("%s's input stream holds %s", dc, subj)
			}
		}
	}
}

func mustSubjects(t *testing.T, ctx context.Context, s jetstream.Stream) map[string]uint64 {
	t.Helper()
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) == 0 {
		t.Fatal("empty input stream")
	}
	return info.State.Subjects
}

func TestParseRejectsAnUnknownDCInDCNatsURLs(t *testing.T) {
	for _, v := range []string{"dc-x=nats://h:4222", "dc-a", "dc-a="} {
		if _, err := parse([]string{"--dcs", "dc-a,dc-b", "--dc-nats-urls", v}, func(string) string { return "" }, &bytes.Buffer{}); err == nil {
			t.Fatalf("--dc-nats-urls %q accepted", v)
		}
	}
	if _, err := parse([]string{"--query-via", "grpc"}, func(string) string { return "" }, &bytes.Buffer{}); err == nil {
		t.Fatal("--query-via grpc accepted")
	}
}

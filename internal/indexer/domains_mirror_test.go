package indexer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/client"
	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/lanerules"
	"github.com/ckfrelay/ckfrelay/testenv"
	"github.com/ckfrelay/ckfrelay/testenv/promtest"
)

// pkg/client's Mirror following several domains is this package's
// registry in the router's process; its tests live here, beside the
// registry's fixtures.

// A mirror of two domains answers each model exactly as the indexer
// process serving both does (JSON by "model", hashes through ForModel,
// no model for the first domain), refuses a model it does not follow, and
// when one domain's relays die, that domain goes unready while the other
// keeps its answers and readiness.
func TestMirrorFollowsSeveralDomains(t *testing.T) {
	e := newEnv(t)
	const stale = 2 * time.Second
	ix := e.start(t, domains.Config{Base: baseConfig(t, stale), Domains: []string{"llama", "qwen"}})
	llama := e.relay(t, "llama", "dc-a", testBlocks)
	qwenA := e.relay(t, "qwen", "dc-a", testBlocks)
	qwenB := e.relay(t, "qwen", "dc-b", testBlocks)
	wl, wqa, wqb := newWorkload(1, 30, 5), newWorkload(2, 30, 7), newWorkload(3, 30, 4)
	wl.publish(t, llama)
	wqa.publish(t, qwenA)
	wqb.publish(t, qwenB)
	eventually(t, "indexer exact", func() error {
		return errors.Join(wl.exact(ix, "llama", "dc-a"), wqa.exact(ix, "qwen", "dc-a"), wqb.exact(ix, "qwen", "dc-b"))
	})

	reg := prometheus.NewRegistry()
	m, err := client.NewMirror(e.srv.Connect(t), client.MirrorConfig{Domain: "llama", Domains: []string{"qwen"},
		Rules:   lanerules.Rules{MaxApplyLag: time.Minute, LaneStaleAfter: stale, StaleLanes: lanerules.StaleExclude},
		Metrics: reg, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Background(t, m.Run)
	if got := m.Domains(); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Fatalf("mirror domains %v", got)
	}

	// same compares the mirror's answers for model with the indexer's,
	// chain by chain, in each of the ways a router may ask.
	same := func(model string, w *workload) error {
		for i, c := range w.chains {
			want, err := ix.Match(api.Query{Locals: c, Model: model})
			if err != nil {
				return fmt.Errorf("indexer %s chain %d: %w", model, i, err)
			}
			req := api.MatchRequest{Model: model, LocalHashes: make([]uint64, len(c))}
			for j, l := range c {
				req.LocalHashes[j] = uint64(l)
			}
			got, err := m.Match(context.Background(), req)
			if err != nil || !testenv.SameAnswer(got, want) {
				return fmt.Errorf("%s chain %d: mirror %+v %v, indexer %+v", model, i, got, err, want)
			}
			seqs := ckf.SequenceHashes(nil, c)
			hs := make([]uint64, len(seqs))
			for j, s := range seqs {
				hs[j] = uint64(s)
			}
			if got, err = m.ForModel(model).MatchSequenceHashes(context.Background(), hs); err != nil || !testenv.SameAnswer(got, want) {
				return fmt.Errorf("%s chain %d by hashes: mirror %+v %v, indexer %+v", model, i, got, err, want)
			}
			if model == "llama" {
				req.Model = ""
				if got, err = m.Match(context.Background(), req); err != nil || !testenv.SameAnswer(got, want) {
					return fmt.Errorf("chain %d naming no model: mirror %+v %v, llama %+v", i, got, err, want)
				}
			}
		}
		return nil
	}
	eventually(t, "the mirror answers as the indexer", func() error {
		return errors.Join(same("llama", wl), same("qwen", wqa), same("qwen", wqb))
	})
	lanes := map[string]int{}
	for _, l := range m.Lanes() {
		lanes[l.Domain]++
	}
	if lanes["llama"] != 1 || lanes["qwen"] != 2 {
		t.Fatalf("mirror lanes by domain %v, want llama 1 and qwen 2", lanes)
	}
	if !strings.Contains(promtest.Text(reg), `domain="qwen"`) {
		t.Fatalf("no mirror series labelled domain=qwen:\n%s", promtest.Text(reg))
	}

	_, err = m.Match(context.Background(), api.MatchRequest{Model: "gemma", LocalHashes: []uint64{1}})
	if !errors.Is(err, client.ErrUnknownModel) {
		t.Fatalf("a model the mirror does not follow: %v, want ErrUnknownModel", err)
	}
	if _, known := m.DomainReady("gemma"); known {
		t.Fatal("gemma known to the mirror")
	}

	// qwen's relays die: its lanes go stale and leave its answers, llama's
	// stay exact and ready all along.
	qwenA.kill(t)
	qwenB.kill(t)
	eventually(t, "qwen unready in the mirror, llama unchanged", func() error {
		if ready, known := m.DomainReady("llama"); !ready || !known {
			return errors.New("llama not ready")
		}
		if err := same("llama", wl); err != nil {
			return fmt.Errorf("llama changed: %w", err)
		}
		if m.ForModel("qwen").Ready() {
			return errors.New("qwen still ready")
		}
		return nil
	})
	if _, err := m.ForModel("qwen").Match(context.Background(), api.MatchRequest{LocalHashes: []uint64{1}}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("qwen without a lane: %v, want ErrUnavailable", err)
	}
	if !m.Ready() {
		t.Fatal("the mirror unready while llama answers")
	}
}

package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// watchModels runs WatchModels against addr until the test ends; the
// returned func reports the last list as "id[aliases]/block ...".
func watchModels(t *testing.T, addr string, acceptLegacy bool) func() string {
	t.Helper()
	lists := make(chan []client.Model, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- client.WatchModels(ctx, client.Config{Name: "src", Addr: addr, AcceptLegacy: acceptLegacy,
			BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}, func(m []client.Model) { lists <- m })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchModels: %v", err)
		}
	})
	last := "none"
	return func() string {
		for {
			select {
			case ms := <-lists:
				last = ""
				for _, m := range ms {
					last += fmt.Sprintf("%s%v/%d ", m.ID, m.Aliases, m.BlockSize)
				}
			default:
				return last
			}
		}
	}
}

// WatchModels lists the Base models of the accepted descriptors of one
// catalog serving several pools, and follows the catalog as pools leave.
func TestWatchModelsListsTheCatalogsModels(t *testing.T) {
	addr, srv := serveReal(t, nil, nil)
	llama, qwen := newTestPub(), newTestPub()
	llama.setGen(t, testSpec, 11, 1024)                                                                                  // llama, alias chat, block 4, AGGREGATED
	qwenSpec := server.PoolSpec{Model: "qwen", Namespace: "prod", Component: "qwen", Endpoint: "generate", BlockSize: 8} // [LEGACY]
	qwen.setGen(t, qwenSpec, 12, 1024)
	srv.AddPool("llama", llama)
	srv.AddPool("qwen", qwen)

	all, aggregated := watchModels(t, addr, true), watchModels(t, addr, false)
	want := func(f func() string, list string) {
		t.Helper()
		testenv.Eventually(t, waitTotal, 5*time.Millisecond, func() error {
			if got := f(); got != list {
				return fmt.Errorf("models %q, want %q", got, list)
			}
			return nil
		})
	}
	want(all, "llama[chat]/4 qwen[]/8 ")
	want(aggregated, "llama[chat]/4 ")

	srv.RemovePool("llama")
	want(all, "qwen[]/8 ")
	want(aggregated, "")
}

func TestModelNames(t *testing.T) {
	m := client.Model{ID: "meta/llama", Aliases: []string{"chat", "llama"}}
	for name, want := range map[string]bool{"meta/llama": true, "chat": true, "llama": true, "meta": false, "": false} {
		if m.Names(name) != want {
			t.Errorf("Names(%q) = %t", name, !want)
		}
	}
}

package domains

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/testenv"
)

// The registry's own cost per query, without any table: the lookup of the
// domain a query names (Registry.lookup) and the dispatch to its service
// (Registry.Match up to the service's search, which answers
// ErrUnavailable at once since no table is built). Each query names a
// random domain of n (distinct inputs from a seeded generator), so the
// figure at 32 domains against 1 is the registry's share of a cold
// query's growth with the number of domains (docs/benchmarks.md):
//
//	go test -run '^$' -bench 'RegistryPath' -benchtime 2000000x ./pkg/domains
func BenchmarkRegistryPath(b *testing.B) {
	srv := testenv.StartServer(b)
	nc := srv.Connect(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 8, 32} {
		names := make([]string, n)
		for d := range names {
			names[d] = fmt.Sprintf("n%d-model-%02d", n, d)
		}
		r, err := New(nc, js, Config{Domains: names, MaxDomains: n, Logger: zerolog.Nop(),
			Base: follow.Config{Logger: zerolog.Nop()}})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		order := make([]string, 4096)
		for i := range order {
			order[i] = names[rng.IntN(n)]
		}
		locals := []ckf.LocalBlockHash{1, 2, 3}
		b.Run("lookup/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := r.lookup(order[i%len(order)]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("match/"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := r.Match(api.Query{Locals: locals, Model: order[i%len(order)]}); !errors.Is(err, api.ErrUnavailable) {
					b.Fatal(err)
				}
			}
		})
	}
}

package routeflags

import (
	"errors"
	"testing"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/route"
)

func TestParse(t *testing.T) {
	s, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.LoadMaxAge != follow.DefaultLoadMaxAge || s.Route.BlockSize != follow.DefaultRouteBlockSize || s.Route.Policy.Policy != route.Cost ||
		s.Route.Policy.AffinityMargin != route.AffinityMarginDefault || s.Route.Policy.DefaultQueueTokensPerSec != 0 {
		t.Fatalf("defaults %+v", s)
	}
	s, err = Parse([]string{"--dc-rtt", "a=5ms,b=1s", "--dc-queue-rate", "a=1000", "--route-block-size", "32,m=64", "--route-affinity-margin", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Route.Policy.RTT["b"] != time.Second || s.Route.Policy.QueueTokensPerSec["a"] != 1000 || s.Route.BlockSize != 32 || s.Route.DomainBlockSize["m"] != 64 ||
		s.Route.Policy.AffinityMargin != -1 {
		t.Fatalf("parsed %+v", s)
	}
	for _, bad := range [][]string{{"--nats-url", "x"}, {"extra"}} {
		if _, err := Parse(bad); !errors.Is(err, ErrNotRouteFlag) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	for flag, args := range map[string][]string{
		"dc-queue-rate":    {"--dc-rtt", "a=5ms", "--dc-queue-rate", "b=1000"},
		"dc-prefill-rate":  {"--dc-prefill-rate", "a=1e13"},
		"route-block-size": {"--route-block-size", "16,m=99999999"},
		"dc-rtt":           {"--dc-rtt", "a=2h"},
	} {
		var fe *FlagError
		if _, err := Parse(args); !errors.As(err, &fe) || fe.Flag != flag {
			t.Errorf("%q: %v, want an error of --%s", args, err, flag)
		}
	}
	// An explicit default RTT gives every DC one.
	if _, err := Parse([]string{"--dc-queue-rate", "b=1000", "--route-default-rtt", "50ms"}); err != nil {
		t.Fatal(err)
	}
}

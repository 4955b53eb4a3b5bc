package testenv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// HubDomain is the JetStream domain of the hub server of a Topology.
const HubDomain = "hub"

// leafUpTimeout bounds the wait for all leaf connections.
const leafUpTimeout = 20 * time.Second

// Topology is a hub server plus one leaf-node server per DC, as the global
// indexer's site and the DC sites are wired in production: every server has
// its own JetStream domain (HubDomain for the hub, the DC name for a leaf).
//
// Each leaf reaches the hub through its own Link (the WAN), which a test may
// Cut and Heal, and never lets worker events (LocalSubjects) cross it: they
// stay in the DC's JetStream domain.
type Topology struct {
	hub    *Server
	leaves map[string]*Server
	links  map[string]*Link
	dcs    []string
}

// LocalSubjects never cross a leaf link: each DC's input events are
// captured by that DC's own KVEVENTS stream only.
var LocalSubjects = []string{"kvevents.>"}

// StartHubWithLeaves starts the hub, then one leaf per DC name, and waits
// until every leaf connection is up on both ends. DC names must be distinct
// valid JetStream domain names other than HubDomain.
func StartHubWithLeaves(t testing.TB, dcNames ...string) *Topology {
	t.Helper()
	seen := make(map[string]bool, len(dcNames))
	for _, dc := range dcNames {
		if dc == "" || dc == HubDomain || seen[dc] {
			t.Fatalf("testenv: DC names must be distinct, non-empty and not %q: %q", HubDomain, dcNames)
		}
		seen[dc] = true
	}
	tp := &Topology{
		hub:    StartServer(t, WithName(HubDomain), WithDomain(HubDomain), WithLeafNodeListener()),
		leaves: make(map[string]*Server, len(dcNames)),
		dcs:    append([]string(nil), dcNames...),
	}
	tp.links = make(map[string]*Link, len(dcNames))
	hubAddr := strings.TrimPrefix(tp.hub.LeafNodeURL(t), "nats-leaf://")
	for _, dc := range dcNames {
		link := NewLink(t, hubAddr)
		tp.links[dc] = link
		tp.leaves[dc] = StartServer(t, WithName(dc), WithDomain(dc), WithLeafRemote("nats-leaf://"+link.Addr()),
			WithLeafDeny(LocalSubjects...))
	}
	tp.WaitLeavesConnected(t)
	return tp
}

// WaitLeavesConnected polls until the hub counts one leaf connection per DC
// and every leaf counts its hub connection (e.g. after a Restart).
func (tp *Topology) WaitLeavesConnected(t testing.TB) {
	t.Helper()
	Eventually(t, leafUpTimeout, 10*time.Millisecond, func() error {
		if n := tp.hub.NATS().NumLeafNodes(); n != len(tp.dcs) {
			return fmt.Errorf("hub has %d leaf connections, want %d", n, len(tp.dcs))
		}
		for _, dc := range tp.dcs {
			if n := tp.leaves[dc].NATS().NumLeafNodes(); n != 1 {
				return fmt.Errorf("leaf %s has %d hub connections, want 1", dc, n)
			}
		}
		return nil
	})
}

// Hub returns the hub server.
func (tp *Topology) Hub() *Server { return tp.hub }

// Leaf returns the leaf server of dc; it fails the test for an unknown DC.
func (tp *Topology) Leaf(t testing.TB, dc string) *Server {
	t.Helper()
	s, ok := tp.leaves[dc]
	if !ok {
		t.Fatalf("testenv: no leaf for DC %q (have %q)", dc, tp.dcs)
	}
	return s
}

// Link returns the WAN link of dc's leaf; it fails the test for an
// unknown DC.
func (tp *Topology) Link(t testing.TB, dc string) *Link {
	t.Helper()
	l, ok := tp.links[dc]
	if !ok {
		t.Fatalf("testenv: no link for DC %q (have %q)", dc, tp.dcs)
	}
	return l
}

// DCs returns the DC names in start order.
func (tp *Topology) DCs() []string { return append([]string(nil), tp.dcs...) }

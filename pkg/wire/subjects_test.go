package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

func TestValidateToken(t *testing.T) {
	ok := []string{"prod", "dc-a", "DC_1", "x", strings.Repeat("a", MaxTokenBytes), "région", "a/b", "a=b"}
	for _, s := range ok {
		if err := ValidateToken("dc", s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
	bad := map[string]string{
		"":                                   "empty",
		strings.Repeat("a", MaxTokenBytes+1): "longer than 64",
		"a.b":                                "'.'",
		"a*":                                 "wildcard",
		">":                                  "wildcard",
		"a b":                                "whitespace",
		"a\tb":                               "whitespace",
		"a\u00a0b":                           "whitespace",
		"a\x01":                              "control",
		"a\xff":                              "UTF-8",
	}
	for s, reason := range bad {
		err := ValidateToken("domain", s)
		var te *TokenError
		if !errors.As(err, &te) || !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%q: got %v, want *TokenError", s, err)
			continue
		}
		if te.What != "domain" || te.Token != s || !strings.Contains(te.Reason, reason) {
			t.Errorf("%q: %+v, want reason containing %q", s, te, reason)
		}
		if !strings.Contains(err.Error(), "domain") {
			t.Errorf("%q: message %q does not name the value", s, err)
		}
	}
}

func TestLaneSubjects(t *testing.T) {
	s, err := NewLaneSubjects("prod", "dc-a")
	if err != nil {
		t.Fatal(err)
	}
	want := LaneSubjects{
		Delta: "ckf.prod.dc-a.delta", Snapshot: "ckf.prod.dc-a.snap", Drain: "ckf.prod.dc-a.drain",
		Heartbeat: "ckf.prod.dc-a.hb", Filter: "ckf.prod.dc-a.>",
	}
	if s != want {
		t.Fatalf("got %+v", s)
	}
	for k := KindDelta; k <= KindHeartbeat; k++ {
		subj := s.For(k)
		d, dc, kind, err := ParseLaneSubject(subj)
		if err != nil || d != "prod" || dc != "dc-a" || kind != k {
			t.Errorf("ParseLaneSubject(%q) = %q %q %v %v", subj, d, dc, kind, err)
		}
	}
	if s.For(0) != "" {
		t.Error("For(0) not empty")
	}
	for _, bad := range []string{"ckf.prod.dc-a.other", "ckf.prod.dc-a", "kvevents.prod.dc-a.delta", "ckf.prod.dc-a.delta.x", "ckf..dc-a.delta"} {
		if _, _, _, err := ParseLaneSubject(bad); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("ParseLaneSubject(%q) = %v", bad, err)
		}
	}
	if _, err := NewLaneSubjects("prod", "dc.a"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("bad dc accepted: %v", err)
	}
	if _, err := NewLaneSubjects("p>", "dc"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("bad domain accepted: %v", err)
	}
}

func TestWorkerEventsSubjects(t *testing.T) {
	s, err := WorkerEventsSubject("prod", "dc-a", 42)
	if err != nil || s != "kvevents.prod.dc-a.42" {
		t.Fatalf("got %q, %v", s, err)
	}
	f, err := WorkerEventsFilter("prod", "dc-a")
	if err != nil || f != "kvevents.prod.dc-a.*" {
		t.Fatalf("got %q, %v", f, err)
	}
	d, dc, id, err := ParseWorkerEventsSubject("kvevents.prod.dc-a.18446744073709551615")
	if err != nil || d != "prod" || dc != "dc-a" || id != 1<<64-1 {
		t.Fatalf("parse = %q %q %d %v", d, dc, id, err)
	}
	for _, bad := range []string{"kvevents.prod.dc-a.042", "kvevents.prod.dc-a.-1", "kvevents.prod.dc-a.x", "ckf.prod.dc-a.1", "kvevents.prod.1"} {
		if _, _, _, err := ParseWorkerEventsSubject(bad); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("ParseWorkerEventsSubject(%q) = %v", bad, err)
		}
	}
	if _, err := WorkerEventsSubject("", "dc", 1); !errors.Is(err, ErrInvalidToken) {
		t.Error("empty domain accepted")
	}
}

func TestSnapshotObjectName(t *testing.T) {
	n, err := SnapshotObjectName("prod", "dc-a", 3, 9)
	if err != nil || n != "snap/prod/dc-a/3-9" {
		t.Fatalf("got %q, %v", n, err)
	}
	m := testSnapshotMarker()
	m.ObjectName = n
	if _, err := AppendSnapshotMarker(nil, &m); err != nil {
		t.Fatalf("marker refuses its own object name: %v", err)
	}
	if _, err := SnapshotObjectName("prod", "", 3, 9); err == nil {
		t.Fatal("empty dc accepted")
	}
}

func TestMsgID(t *testing.T) {
	id := testIdentity()
	a := MsgID(KindDelta, &id, 3, 5)
	if a != MsgID(KindDelta, &id, 3, 5) {
		t.Fatal("not deterministic")
	}
	if !strings.HasPrefix(a, "delta-") || !strings.HasSuffix(a, "-3-5") || len(a) != len("delta-")+32+len("-3-5") {
		t.Fatalf("unexpected shape %q", a)
	}
	other := id
	other.ProducerIncarnation++
	seen := map[string]string{a: "base"}
	for name, got := range map[string]string{
		"drain kind":  MsgID(KindDrainMarker, &id, 3, 5),
		"epoch":       MsgID(KindDelta, &id, 4, 5),
		"sequence":    MsgID(KindDelta, &id, 3, 6),
		"incarnation": MsgID(KindDelta, &other, 3, 5),
		"digits":      MsgID(KindDelta, &id, 35, 5), // "-35-5" vs "-3-55"
		"digits2":     MsgID(KindDelta, &id, 3, 55),
	} {
		if prev, dup := seen[got]; dup {
			t.Errorf("%s collides with %s: %q", name, prev, got)
		}
		seen[got] = name
	}
	if IdentityKey(&id) == IdentityKey(&other) {
		t.Error("IdentityKey ignores the incarnation")
	}
	source := id
	source.Pool.Domain.CacheSemantics.Source = ckf.SourceDefaultDerived
	if IdentityKey(&id) == IdentityKey(&source) {
		t.Error("IdentityKey ignores the source")
	}
}

func TestMessageKindString(t *testing.T) {
	want := map[MessageKind]string{KindDelta: "delta", KindSnapshotMarker: "snap", KindDrainMarker: "drain", KindHeartbeat: "hb", 9: "MessageKind(9)"}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("%d: %q, want %q", k, k.String(), s)
		}
	}
	if MessageKind(0).Valid() || MessageKind(5).Valid() || !KindHeartbeat.Valid() {
		t.Error("Valid wrong")
	}
}

func TestValidateNameIsTheOneNameRule(t *testing.T) {
	for _, ok := range []string{"a", "llama-3_1", strings.Repeat("x", MaxNameBytes)} {
		if err := ValidateName("domain", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", "a b", "llama:8b", "é", strings.Repeat("x", MaxNameBytes+1)} {
		if err := ValidateName("domain", bad); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%q: %v, want ErrInvalidToken", bad, err)
		}
	}
	f, err := WorkerEventsDomainsFilter("dc-a")
	if err != nil || f != "kvevents.*.dc-a.*" {
		t.Fatalf("filter %q, %v", f, err)
	}
	if _, err := WorkerEventsDomainsFilter("dc.a"); err == nil {
		t.Fatal("a dc with a dot built a filter")
	}
}

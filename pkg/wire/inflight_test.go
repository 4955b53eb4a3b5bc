package wire

import (
	"errors"
	"testing"
	"time"
)

func TestRouteAccountRoundTrips(t *testing.T) {
	for _, a := range []RouteAccount{{Origin: 7, Tokens: 32768, RTT: 5 * time.Millisecond},
		{Origin: 1<<64 - 1, Tokens: MaxAccountTokens, RTT: MaxAccountRTT}, {Tokens: 1}} {
		b, err := AppendRouteAccount(nil, &a)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRouteAccount(b)
		if err != nil || got != a {
			t.Fatalf("got %+v, %v; want %+v", got, err, a)
		}
		if _, err := PeekKind(b); !errors.Is(err, ErrKind) {
			t.Fatalf("a lane consumer must refuse a route account, PeekKind said %v", err)
		}
	}
	if KindRouteAccount.String() != "route_account" {
		t.Fatal(KindRouteAccount.String())
	}
}

func TestRouteAccountRefuses(t *testing.T) {
	for name, a := range map[string]RouteAccount{
		"zero tokens": {Tokens: 0}, "too many tokens": {Tokens: MaxAccountTokens + 1},
		"negative rtt": {Tokens: 1, RTT: -1}, "rtt past bound": {Tokens: 1, RTT: MaxAccountRTT + 1},
	} {
		if _, err := AppendRouteAccount(nil, &a); err == nil {
			t.Errorf("%s: encoded", name)
		}
		b := pack(arr{uint64(1), uint64(KindRouteAccount), a.Origin, a.Tokens, uint64(a.RTT)})
		var de *DecodeError
		if _, err := DecodeRouteAccount(b); !errors.As(err, &de) || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decode said %v", name, err)
		}
	}
	good, _ := AppendRouteAccount(nil, &RouteAccount{Tokens: 5})
	for name, b := range map[string][]byte{
		"trailing":      append(append([]byte{}, good...), 0),
		"truncated":     good[:len(good)-1],
		"other kind":    pack(arr{uint64(1), uint64(KindPoolLoad), uint64(0), uint64(5), uint64(0)}),
		"other version": pack(arr{uint64(2), uint64(KindRouteAccount), uint64(0), uint64(5), uint64(0)}),
		"four fields":   pack(arr{uint64(1), uint64(KindRouteAccount), uint64(0), uint64(5)}),
		"rtt past int":  pack(arr{uint64(1), uint64(KindRouteAccount), uint64(0), uint64(5), uint64(1 << 63)}),
	} {
		if _, err := DecodeRouteAccount(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestRouteAccountSubjects(t *testing.T) {
	s, err := RouteAccountSubject("d1", "dc-a")
	if err != nil || s != "ckfload.d1.dc-a.inflight" {
		t.Fatalf("%q %v", s, err)
	}
	f, err := RouteAccountFilter("d1")
	if err != nil || f != "ckfload.d1.*.inflight" {
		t.Fatalf("%q %v", f, err)
	}
	if dc, err := ParseRouteAccountSubject(s, "d1"); err != nil || dc != "dc-a" {
		t.Fatalf("%q %v", dc, err)
	}
	for _, bad := range []string{"ckfload.d1.dc-a.pool", "ckfload.d2.dc-a.inflight", "ckfload.d1..inflight", "ckfload.d1.a.b.inflight"} {
		if _, err := ParseRouteAccountSubject(bad, "d1"); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := RouteAccountSubject("d1", "a.b"); err == nil {
		t.Error("a DC with a dot made a subject")
	}
	if _, err := RouteAccountFilter("d*"); err == nil {
		t.Error("a wildcard domain made a filter")
	}
}

func FuzzDecodeRouteAccount(f *testing.F) {
	b, _ := AppendRouteAccount(nil, &RouteAccount{Origin: 3, Tokens: 32768, RTT: time.Second})
	f.Add(b)
	f.Add(b[:len(b)-1])
	p := testPoolLoad()
	pb, _ := AppendPoolLoad(nil, &p)
	f.Add(pb)
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip(t, in, func(b []byte, a *RouteAccount) (err error) {
			*a, err = DecodeRouteAccount(b)
			return err
		}, AppendRouteAccount)
	})
}

package wire

import (
	"time"
)

// Route accounts (docs/protocol.md §6): an indexer replica, or any router
// sharing a domain's DCs, that routes a request to a DC publishes the
// prompt tokens it sent there on ckfload.<domain>.<dc>.inflight, so the
// other routers count them as load until the DC's next load window can
// show them. Core NATS like the rest of the load plane: a lost account
// costs one request's worth of spread, never a wrong load.

// KindRouteAccount is the route account's message kind (not a lane kind).
const KindRouteAccount MessageKind = 7

// Bounds of a route account.
const (
	// MaxAccountTokens bounds RouteAccount.Tokens (2³², as the in-flight
	// ledger caps an entry).
	MaxAccountTokens = 1 << 32
	// MaxAccountRTT bounds RouteAccount.RTT (one hour, the route API's
	// bound on an RTT override).
	MaxAccountRTT = time.Hour
)

// RouteAccount is one route's account.
type RouteAccount struct {
	// Origin names the router that routed (its instance id), so it can
	// ignore its own accounts.
	Origin uint64
	// Tokens are the prompt tokens the DC is to prefill (1..MaxAccountTokens).
	Tokens uint64
	// RTT is the router's RTT to the DC (0..MaxAccountRTT): the account is
	// due (a window can show it) that long after it is received.
	RTT time.Duration
}

const routeAccountFields = 5

func checkRouteAccount(a *RouteAccount) error {
	if a.Tokens == 0 || a.Tokens > MaxAccountTokens {
		return decodeErr(ErrMalformed, "account.tokens", "%d, want 1..%d", a.Tokens, uint64(MaxAccountTokens))
	}
	if a.RTT < 0 || a.RTT > MaxAccountRTT {
		return decodeErr(ErrMalformed, "account.rtt_ns", "%d, want 0..%d", int64(a.RTT), int64(MaxAccountRTT))
	}
	return nil
}

// AppendRouteAccount appends the encoding of a to dst
// ([1, 7, origin, tokens, rtt_ns]). On error it returns dst unchanged and
// an *EncodeError.
func AppendRouteAccount(dst []byte, a *RouteAccount) ([]byte, error) {
	if err := checkRouteAccount(a); err != nil {
		return dst, asEncodeError(err)
	}
	dst = appendHeader(dst, KindRouteAccount, routeAccountFields)
	dst = appendUint(dst, a.Origin)
	dst = appendUint(dst, a.Tokens)
	return appendUint(dst, uint64(a.RTT)), nil
}

// DecodeRouteAccount decodes one route account strictly (smallest
// encodings, no trailing bytes, every value in bounds). On error it
// returns a *DecodeError.
func DecodeRouteAccount(b []byte) (RouteAccount, error) {
	var a RouteAccount
	r := reader{b: b}
	if err := r.header(KindRouteAccount, routeAccountFields); err != nil {
		return RouteAccount{}, err
	}
	var err error
	if a.Origin, err = r.uint("account.origin"); err != nil {
		return RouteAccount{}, err
	}
	if a.Tokens, err = r.uint("account.tokens"); err != nil {
		return RouteAccount{}, err
	}
	rtt, err := r.uint("account.rtt_ns")
	if err != nil {
		return RouteAccount{}, err
	}
	if rtt > uint64(MaxAccountRTT) {
		return RouteAccount{}, decodeErr(ErrMalformed, "account.rtt_ns", "%d, want 0..%d", rtt, int64(MaxAccountRTT))
	}
	a.RTT = time.Duration(rtt)
	if err := r.end(); err != nil {
		return RouteAccount{}, err
	}
	if err := checkRouteAccount(&a); err != nil {
		return RouteAccount{}, err
	}
	return a, nil
}

// RouteAccountSubject is ckfload.<domain>.<dc>.inflight.
func RouteAccountSubject(domain, dc string) (string, error) {
	if err := validatePool(domain, dc); err != nil {
		return "", err
	}
	return LoadSubjectPrefix + "." + domain + "." + dc + ".inflight", nil
}

// RouteAccountFilter is ckfload.<domain>.*.inflight, every DC of a domain.
func RouteAccountFilter(domain string) (string, error) {
	if err := ValidateToken("domain", domain); err != nil {
		return "", err
	}
	return LoadSubjectPrefix + "." + domain + ".*.inflight", nil
}

// ParseRouteAccountSubject returns the DC of ckfload.<domain>.<dc>.inflight.
func ParseRouteAccountSubject(subject, domain string) (string, error) {
	prefix := LoadSubjectPrefix + "." + domain + "."
	rest, ok := cutPrefix(subject, prefix)
	dc, ok2 := cutSuffix(rest, ".inflight")
	if !ok || !ok2 {
		return "", &TokenError{What: "route account subject", Token: subject, Reason: "want " + prefix + "<dc>.inflight"}
	}
	if err := ValidateToken("dc", dc); err != nil {
		return "", err
	}
	return dc, nil
}

package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// POST /v1/route (and ckfq.<domain>.route): the DCs ranked for a request.
// The request is a match request (any of its forms, JSON or the binary
// ContentTypeSeqHashes body) plus RouteOptions; the answer is the
// indexer's pkg/route decision with every cost term of every lane.

// RouteSubjectT is the NATS micro endpoint's subject of routes, %s being
// the domain (outside ckf.>, as MatchSubjectT).
const RouteSubjectT = "ckfq.%s.route"

// RouteSubject is the NATS subject that answers route requests of domain.
func RouteSubject(domain string) string { return fmt.Sprintf(RouteSubjectT, domain) }

// HeaderRouteOptions carries RouteOptions, URL-query encoded
// (EncodeQuery), with a binary body over NATS; over HTTP they are the URL's
// query.
const HeaderRouteOptions = "Ckf-Route-Options"

// Policies and stale modes a route request may name (pkg/route's).
var (
	RoutePolicies   = []string{"cost", "prefix", "load", "least-load", "llm-d", "sglang", "dynamo", "round-robin", "random"}
	RouteStaleModes = []string{"exclude", "penalize"}
)

// Limits of route options.
const (
	// MaxRouteTokens bounds input_tokens and output_tokens (2^30).
	MaxRouteTokens = 1 << 30
	// MaxRouteRTTMs bounds an rtt_ms override (one hour).
	MaxRouteRTTMs = 3_600_000
	// MaxRouteRTTs bounds the DCs of an rtt_ms override.
	MaxRouteRTTs = 64
)

// RouteOptions are what a route request adds to a match request. Zero
// values take the indexer's settings.
type RouteOptions struct {
	// InputTokens is the prompt length (0: the request's blocks × block
	// size); OutputTokens the expected output length.
	InputTokens  int
	OutputTokens int
	// Policy is one of RoutePolicies ("": the indexer's --route-policy).
	Policy string
	// RTTMs overrides the RTT to DCs by name, in milliseconds (the
	// router's own site).
	RTTMs map[string]float64
	// Stale is one of RouteStaleModes ("": the indexer's --route-stale).
	Stale string
	// Probe says the caller only asks and will not send the request: the
	// router then counts nothing in flight against the chosen DC.
	Probe bool
}

func (o *RouteOptions) validate() error {
	switch {
	case o.InputTokens < 0 || o.InputTokens > MaxRouteTokens:
		return &RequestError{Field: "input_tokens", Reason: fmt.Sprintf("must be within 0..%d", MaxRouteTokens)}
	case o.OutputTokens < 0 || o.OutputTokens > MaxRouteTokens:
		return &RequestError{Field: "output_tokens", Reason: fmt.Sprintf("must be within 0..%d", MaxRouteTokens)}
	case o.Policy != "" && !slices.Contains(RoutePolicies, o.Policy):
		return &RequestError{Field: "policy", Reason: fmt.Sprintf("%q: want one of %s", o.Policy, strings.Join(RoutePolicies, ", "))}
	case o.Stale != "" && !slices.Contains(RouteStaleModes, o.Stale):
		return &RequestError{Field: "stale", Reason: fmt.Sprintf("%q: want exclude or penalize", o.Stale)}
	case len(o.RTTMs) > MaxRouteRTTs:
		return &RequestError{Field: "rtt_ms", Reason: fmt.Sprintf("more than %d DCs", MaxRouteRTTs)}
	}
	for dc, ms := range o.RTTMs {
		if dc == "" || math.IsNaN(ms) || ms < 0 || ms > MaxRouteRTTMs {
			return &RequestError{Field: "rtt_ms", Reason: fmt.Sprintf("%q: %v ms, want a DC name and 0..%d ms", dc, ms, MaxRouteRTTMs)}
		}
	}
	return nil
}

// DecodeRouteBody decodes a JSON route request: a match request's fields
// plus input_tokens, output_tokens, policy, rtt_ms and stale. The common
// shapes take the match fast path.
func DecodeRouteBody(body []byte) (Query, RouteOptions, error) {
	var fast RouteOptions // apart from o, which the streaming decoder's pointer moves to the heap
	if q, ok := decodeFastRoute(body, &fast); ok {
		return q, fast, nil
	}
	o := new(RouteOptions)
	d := &matchDecoder{dec: json.NewDecoder(bytes.NewReader(body)), seen: map[string]bool{}, route: o}
	q, err := d.decode()
	if err != nil {
		return Query{}, RouteOptions{}, err
	}
	if err := o.validate(); err != nil {
		return Query{}, RouteOptions{}, err
	}
	return q, *o, nil
}

// routeField decodes one route option of a JSON body.
func (d *matchDecoder) routeField(key string) error {
	o := d.route
	switch key {
	case "input_tokens":
		return d.scalar(key, &o.InputTokens)
	case "output_tokens":
		return d.scalar(key, &o.OutputTokens)
	case "policy":
		return d.scalar(key, &o.Policy)
	case "stale":
		return d.scalar(key, &o.Stale)
	case "rtt_ms":
		return d.scalar(key, &o.RTTMs)
	case "probe":
		return d.scalar(key, &o.Probe)
	}
	return &RequestError{Field: key, Reason: "unknown field"}
}

// ParseRouteOptions reads RouteOptions from a URL query
// (input_tokens=N&output_tokens=N&policy=P&stale=S&rtt_ms=dc-a:5,dc-b:40&probe=true).
func ParseRouteOptions(raw string) (RouteOptions, error) {
	var o RouteOptions
	if raw == "" {
		return o, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return o, &RequestError{Reason: "route options: " + err.Error()}
	}
	for k, vs := range vals {
		if len(vs) != 1 {
			return o, &RequestError{Field: k, Reason: "given twice"}
		}
		v := vs[0]
		switch k {
		case "input_tokens", "output_tokens":
			n, err := strconv.Atoi(v)
			if err != nil {
				return o, &RequestError{Field: k, Reason: fmt.Sprintf("%q is not an integer", v)}
			}
			if k == "input_tokens" {
				o.InputTokens = n
			} else {
				o.OutputTokens = n
			}
		case "policy":
			o.Policy = v
		case "stale":
			o.Stale = v
		case "probe":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, &RequestError{Field: k, Reason: fmt.Sprintf("%q: want true or false", v)}
			}
			o.Probe = b
		case "rtt_ms":
			o.RTTMs = map[string]float64{}
			for _, pair := range strings.Split(v, ",") {
				dc, ms, ok := strings.Cut(pair, ":")
				f, err := strconv.ParseFloat(ms, 64)
				if !ok || err != nil {
					return o, &RequestError{Field: k, Reason: fmt.Sprintf("%q: want dc:ms,...", pair)}
				}
				o.RTTMs[dc] = f
			}
		default:
			return o, &RequestError{Field: k, Reason: "unknown route option"}
		}
	}
	return o, o.validate()
}

// EncodeQuery is o in ParseRouteOptions' form ("" for the zero value).
func (o RouteOptions) EncodeQuery() string {
	v := url.Values{}
	if o.InputTokens != 0 {
		v.Set("input_tokens", strconv.Itoa(o.InputTokens))
	}
	if o.OutputTokens != 0 {
		v.Set("output_tokens", strconv.Itoa(o.OutputTokens))
	}
	if o.Policy != "" {
		v.Set("policy", o.Policy)
	}
	if o.Stale != "" {
		v.Set("stale", o.Stale)
	}
	if o.Probe {
		v.Set("probe", "true")
	}
	if len(o.RTTMs) > 0 {
		dcs := make([]string, 0, len(o.RTTMs))
		for dc := range o.RTTMs {
			dcs = append(dcs, dc)
		}
		slices.Sort(dcs)
		parts := make([]string, len(dcs))
		for i, dc := range dcs {
			parts[i] = dc + ":" + strconv.FormatFloat(o.RTTMs[dc], 'f', -1, 64)
		}
		v.Set("rtt_ms", strings.Join(parts, ","))
	}
	return v.Encode()
}

// RouteRequest is the JSON body of a route request, for clients: a match
// request and the route options.
type RouteRequest struct {
	MatchRequest
	InputTokens  int                `json:"input_tokens,omitempty"`
	OutputTokens int                `json:"output_tokens,omitempty"`
	Policy       string             `json:"policy,omitempty"`
	RTTMs        map[string]float64 `json:"rtt_ms,omitempty"`
	Stale        string             `json:"stale,omitempty"`
	Probe        bool               `json:"probe,omitempty"`
}

// Options returns the request's route options.
func (r *RouteRequest) Options() RouteOptions {
	return RouteOptions{InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, Policy: r.Policy, RTTMs: r.RTTMs, Stale: r.Stale, Probe: r.Probe}
}

// RouteTerms are the parts of a lane's cost, in milliseconds.
type RouteTerms struct {
	RTTMs     float64 `json:"rtt_ms"`
	QueueMs   float64 `json:"queue_ms"`
	PrefillMs float64 `json:"prefill_ms"`
	PenaltyMs float64 `json:"penalty_ms"`
}

// RouteLoad is the load a lane's cost used. Only known values are in the
// JSON (an unknown one is absent, never 0); the object is null when
// nothing is known.
type RouteLoad struct {
	HasKV            bool
	KVUsedBlocks     uint64
	KVCapacityBlocks uint64
	HasRequests      bool
	Running, Waiting uint64
	HasPrefill       bool
	// ActivePrefillTokens are prompt tokens still to prefill in the DC.
	ActivePrefillTokens uint64
	// PrefillEstimated (only with HasPrefill): ActivePrefillTokens was
	// estimated from request counts (waiting × the mean prompt), not
	// measured, so a caller does not take it for the engines' own figure.
	PrefillEstimated bool
	HasDecode        bool
	// ActiveDecodeBlocks are the KV blocks held by running requests.
	ActiveDecodeBlocks uint64
	// AgeMs is how old the oldest part is, by the indexer's receive time.
	AgeMs int64
}

// Known reports whether anything is known.
func (l *RouteLoad) Known() bool { return l.HasKV || l.HasRequests || l.HasPrefill || l.HasDecode }

type routeLoadJSON struct {
	KVUsedBlocks        *uint64 `json:"kv_used_blocks,omitempty"`
	KVCapacityBlocks    *uint64 `json:"kv_capacity_blocks,omitempty"`
	Running             *uint64 `json:"running,omitempty"`
	Waiting             *uint64 `json:"waiting,omitempty"`
	ActivePrefillTokens *uint64 `json:"active_prefill_tokens,omitempty"`
	PrefillEstimated    bool    `json:"prefill_estimated,omitempty"`
	ActiveDecodeBlocks  *uint64 `json:"active_decode_blocks,omitempty"`
	AgeMs               int64   `json:"age_ms"`
}

// MarshalJSON writes what appendJSON writes.
func (l RouteLoad) MarshalJSON() ([]byte, error) { return l.appendJSON(nil), nil }

// UnmarshalJSON reads the known values back with their presence.
func (l *RouteLoad) UnmarshalJSON(b []byte) error {
	*l = RouteLoad{}
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var j routeLoadJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if (j.KVUsedBlocks == nil) != (j.KVCapacityBlocks == nil) || (j.Running == nil) != (j.Waiting == nil) {
		return fmt.Errorf("route load: used and capacity blocks, running and waiting, come in pairs")
	}
	if j.PrefillEstimated && j.ActivePrefillTokens == nil {
		return fmt.Errorf("route load: prefill_estimated without active_prefill_tokens")
	}
	if j.KVUsedBlocks != nil {
		l.HasKV, l.KVUsedBlocks, l.KVCapacityBlocks = true, *j.KVUsedBlocks, *j.KVCapacityBlocks
	}
	if j.Running != nil {
		l.HasRequests, l.Running, l.Waiting = true, *j.Running, *j.Waiting
	}
	if j.ActivePrefillTokens != nil {
		l.HasPrefill, l.ActivePrefillTokens, l.PrefillEstimated = true, *j.ActivePrefillTokens, j.PrefillEstimated
	}
	if j.ActiveDecodeBlocks != nil {
		l.HasDecode, l.ActiveDecodeBlocks = true, *j.ActiveDecodeBlocks
	}
	if !l.Known() {
		return fmt.Errorf("route load: an object without any value (want null)")
	}
	l.AgeMs = j.AgeMs
	return nil
}

func (l *RouteLoad) appendJSON(dst []byte) []byte {
	if !l.Known() {
		return append(dst, "null"...)
	}
	dst = append(dst, '{')
	field := func(name string, v uint64) {
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		dst = appendUint(dst, v, false)
		dst = append(dst, ',')
	}
	if l.HasKV {
		field("kv_used_blocks", l.KVUsedBlocks)
		field("kv_capacity_blocks", l.KVCapacityBlocks)
	}
	if l.HasRequests {
		field("running", l.Running)
		field("waiting", l.Waiting)
	}
	if l.HasPrefill {
		field("active_prefill_tokens", l.ActivePrefillTokens)
		// Absent when measured, as the object's other values are absent
		// when unknown: a flag that qualifies the figure goes with it.
		if l.PrefillEstimated {
			dst = append(dst, `"prefill_estimated":true,`...)
		}
	}
	if l.HasDecode {
		field("active_decode_blocks", l.ActiveDecodeBlocks)
	}
	dst = append(dst, `"age_ms":`...)
	dst = appendUint(dst, uint64(l.AgeMs), l.AgeMs < 0)
	return append(dst, '}')
}

// RouteLane is one ranked lane.
type RouteLane struct {
	Lane  int    `json:"lane"`
	DC    string `json:"dc"`
	Pool  string `json:"pool"`
	Depth uint32 `json:"depth"`
	// Ready: the lane is in the ready set; an unready lane's depth is 0.
	Ready bool `json:"ready"`
	// AgeMs and Stale: see LaneDepth.
	AgeMs int64 `json:"age_ms"`
	Stale bool  `json:"stale"`
	// CachedTokens are the request's tokens the lane holds (depth × block
	// size, at most the input).
	CachedTokens int `json:"cached_tokens"`
	// CostMs is the cost (the sum of Terms), whatever the policy ranked by.
	CostMs float64    `json:"cost_ms"`
	Terms  RouteTerms `json:"terms"`
	// LoadMissing: no usable load, so the queue term is the missing-load
	// estimate (the worst known queue plus a penalty), never zero.
	LoadMissing bool `json:"load_missing"`
	// RTTUnknown: no RTT is configured or given for the DC; Terms.RTTMs is
	// the largest known RTT of the lanes, never a guessed 0.
	RTTUnknown bool      `json:"rtt_unknown"`
	Load       RouteLoad `json:"load"`
	// Excluded lanes come after the eligible ones, with a Reason (stale,
	// unready).
	Excluded bool   `json:"excluded"`
	Reason   string `json:"reason,omitempty"`
}

// RouteResponse is the JSON answer of a route.
type RouteResponse struct {
	Policy      string `json:"policy"`
	ReadyLanes  uint16 `json:"ready_lanes"`
	Blocks      int    `json:"blocks"`
	BlockSize   int    `json:"block_size"`
	InputTokens int    `json:"input_tokens"`
	// Ranked lists every configured lane, eligible first in the policy's
	// order; Best indexes the chosen one.
	Ranked []RouteLane `json:"ranked"`
	Best   int         `json:"best"`
}

// Chosen returns the chosen lane, nil when none is eligible.
func (r *RouteResponse) Chosen() *RouteLane {
	if r.Best < 0 || r.Best >= len(r.Ranked) {
		return nil
	}
	return &r.Ranked[r.Best]
}

// AppendJSON appends r as JSON (what encoding/json writes for it) to dst,
// without reflection.
func (r *RouteResponse) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"policy":`...)
	dst = appendJSONString(dst, r.Policy)
	dst = append(dst, `,"ready_lanes":`...)
	dst = strconv.AppendUint(dst, uint64(r.ReadyLanes), 10)
	dst = append(dst, `,"blocks":`...)
	dst = strconv.AppendInt(dst, int64(r.Blocks), 10)
	dst = append(dst, `,"block_size":`...)
	dst = strconv.AppendInt(dst, int64(r.BlockSize), 10)
	dst = append(dst, `,"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(r.InputTokens), 10)
	dst = append(dst, `,"ranked":[`...)
	for i := range r.Ranked {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = r.Ranked[i].appendJSON(dst)
	}
	dst = append(dst, `],"best":`...)
	dst = strconv.AppendInt(dst, int64(r.Best), 10)
	return append(dst, '}')
}

func (l *RouteLane) appendJSON(dst []byte) []byte {
	// Each key goes out with its neighbours' punctuation in one append, and
	// a bool with its key (the answer's hot path: a route writes a lane per
	// configured lane).
	dst = append(dst, `{"lane":`...)
	dst = appendUint(dst, uint64(l.Lane), l.Lane < 0)
	dst = append(dst, `,"dc":`...)
	dst = appendJSONString(dst, l.DC)
	dst = append(dst, `,"pool":`...)
	dst = appendJSONString(dst, l.Pool)
	dst = append(dst, `,"depth":`...)
	dst = appendUint(dst, uint64(l.Depth), false)
	dst = appendBoolField(dst, `,"ready":`, l.Ready)
	dst = append(dst, `,"age_ms":`...)
	dst = appendUint(dst, uint64(l.AgeMs), l.AgeMs < 0)
	dst = appendBoolField(dst, `,"stale":`, l.Stale)
	dst = append(dst, `,"cached_tokens":`...)
	dst = appendUint(dst, uint64(l.CachedTokens), l.CachedTokens < 0)
	dst = append(dst, `,"cost_ms":`...)
	dst = appendMs(dst, l.CostMs)
	dst = append(dst, `,"terms":{"rtt_ms":`...)
	dst = appendMs(dst, l.Terms.RTTMs)
	dst = append(dst, `,"queue_ms":`...)
	dst = appendMs(dst, l.Terms.QueueMs)
	dst = append(dst, `,"prefill_ms":`...)
	dst = appendMs(dst, l.Terms.PrefillMs)
	dst = append(dst, `,"penalty_ms":`...)
	dst = appendMs(dst, l.Terms.PenaltyMs)
	dst = appendBoolField(dst, `},"load_missing":`, l.LoadMissing)
	dst = appendBoolField(dst, `,"rtt_unknown":`, l.RTTUnknown)
	dst = append(dst, `,"load":`...)
	dst = l.Load.appendJSON(dst)
	dst = appendBoolField(dst, `,"excluded":`, l.Excluded)
	if l.Reason != "" {
		dst = append(dst, `,"reason":`...)
		dst = appendJSONString(dst, l.Reason)
	}
	return append(dst, '}')
}

// appendBoolField writes key (its punctuation included) and b.
func appendBoolField(dst []byte, key string, b bool) []byte {
	dst = append(dst, key...)
	if b {
		return append(dst, "true"...)
	}
	return append(dst, "false"...)
}

// appendUint writes v in decimal, as strconv does, preceded by '-' and
// read as the magnitude of a two's complement value when neg (the int64
// the caller converted). One digit, the usual lane, depth or flag, is one
// byte appended.
func appendUint(dst []byte, v uint64, neg bool) []byte {
	if neg {
		dst = append(dst, '-')
		v = -v
	}
	if v < 10 {
		return append(dst, byte('0'+v))
	}
	if v < 100 {
		return append(dst, digitPairs[2*v], digitPairs[2*v+1])
	}
	return strconv.AppendUint(dst, v, 10)
}

// appendMs writes a millisecond value as encoding/json writes a float64.
// A value of whole nanoseconds (the ms of a time.Duration) from 10^-6 up to
// 2^31 ms is written from that integer, which skips strconv's search for
// the shortest digits and gives the same text: the decimal n/10^6, trailing
// zeros cut, reads back as v, and no shorter decimal does (two decimals
// 10^-6 apart never round to one float64 below 2^31, where the spacing is
// at most 2^-21).
func appendMs(dst []byte, v float64) []byte {
	if v == 0 && !math.Signbit(v) { // the usual penalty term
		return append(dst, '0')
	}
	if abs := math.Abs(v); abs >= 1e-6 && abs < 1<<31 {
		if n := math.Round(v * 1e6); n/1e6 == v {
			return appendMicros(dst, int64(n))
		}
	}
	return appendMsFloat(dst, v)
}

// appendMicros writes n millionths as a decimal without trailing zeros.
func appendMicros(dst []byte, n int64) []byte {
	u := uint64(n)
	if n < 0 {
		dst = append(dst, '-')
		u = -u
	}
	dst = appendUint(dst, u/1e6, false)
	frac := u % 1e6
	if frac == 0 {
		return dst
	}
	// Six digits, two at a time, then the trailing zeros cut.
	hi, mid, lo := frac/1e4, frac/100%100, frac%100
	b := [7]byte{'.', digitPairs[2*hi], digitPairs[2*hi+1], digitPairs[2*mid], digitPairs[2*mid+1], digitPairs[2*lo], digitPairs[2*lo+1]}
	end := len(b)
	for b[end-1] == '0' {
		end--
	}
	return append(dst, b[:end]...)
}

// digitPairs holds "00" to "99": two decimal digits per lookup.
const digitPairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" + "30313233343536373839" +
	"40414243444546474849" + "50515253545556575859" + "60616263646566676869" + "70717273747576777879" +
	"80818283848586878889" + "90919293949596979899"

// appendMsFloat is appendMs through strconv.
func appendMsFloat(dst []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(dst, '0')
	}
	abs := math.Abs(v)
	f := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		f = 'e'
	}
	return strconv.AppendFloat(dst, v, f, -1, 64)
}

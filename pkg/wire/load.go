package wire

import (
	"math"
	"strconv"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// The load plane (docs/protocol.md §6). Two messages travel beside the
// lanes, on core NATS outside the lane stream's subjects:
//
//   - PoolLoad, relay → indexers on ckfload.<domain>.<dc>.pool: one window
//     of the pool's load, fenced by the lane's producer identity and wire
//     lease like every lane message;
//   - WorkerLoad, engine bridge (or any worker) → its relay on
//     ckfload.<domain>.<dc>.worker.<worker_id>: one worker's serving load,
//     which the relay aggregates into the pool's windows.
//
// Every value has a presence bit in Flags: a value whose bit is clear is
// unknown and must be encoded as 0 (so an encoding is unique), and a reader
// never takes an unknown value for zero load.

// Message kinds of the load plane. They are not lane kinds
// (MessageKind.Valid is false for them): a lane consumer refuses them.
const (
	KindPoolLoad   MessageKind = 5
	KindWorkerLoad MessageKind = 6
)

// LoadFlags say which values of a load message are known.
type LoadFlags uint64

const (
	// LoadKV: KV occupancy (used and capacity blocks). In a WorkerLoad only
	// the capacity is carried (the relay counts residency itself).
	LoadKV LoadFlags = 1 << iota
	// LoadRequests: running and waiting request counts.
	LoadRequests
	// LoadPrefill: prompt tokens still to prefill (queued or running).
	LoadPrefill
	// LoadDecode: KV blocks of requests in decode.
	LoadDecode
	// LoadPrefillEstimated (only with LoadPrefill): the prompt tokens to
	// prefill are estimated from request counts (waiting requests × a mean
	// prompt, as from vLLM's or SGLang's /metrics), so they leave out the
	// prompts the running requests are still prefilling. A pool's window
	// carries it when any of its workers' reports does.
	LoadPrefillEstimated

	loadFlagsAll = LoadKV | LoadRequests | LoadPrefill | LoadDecode | LoadPrefillEstimated
	// LoadServing are the flags of the serving load's values (everything
	// but KV and the estimate's mark).
	LoadServing = LoadRequests | LoadPrefill | LoadDecode
)

// Has reports whether every flag of f2 is set.
func (f LoadFlags) Has(f2 LoadFlags) bool { return f&f2 == f2 }

// ServingLoad is what a worker, or a pool in aggregate, is serving.
type ServingLoad struct {
	Running, Waiting    uint64 // LoadRequests
	ActivePrefillTokens uint64 // LoadPrefill
	ActiveDecodeBlocks  uint64 // LoadDecode
}

// PoolLoad is one load window of a pool.
type PoolLoad struct {
	Identity ckf.ProducerIdentity
	Lease    WireLease
	// WindowSequence increases by one each window within an epoch.
	WindowSequence uint64
	// Time is the relay's wall clock when it built the window (1970..2262).
	Time time.Time
	// WindowMs is the window period.
	WindowMs uint64
	Flags    LoadFlags
	// KV occupancy (LoadKV): resident (worker, block) pairs of the exact
	// state, against the capacity the workers declare (> 0).
	KVUsedBlocks, KVCapacityBlocks uint64
	// KVWorkers is how many workers the exact state holds blocks of (LoadKV).
	KVWorkers uint64
	// Serving load summed over the workers (LoadServing bits), complete:
	// set only when every worker known to the relay reported freshly.
	Serving ServingLoad
	// ServingWorkers is how many workers the serving load sums (> 0 with
	// any serving bit), and ServingTime the oldest report among them.
	ServingWorkers uint64
	ServingTime    time.Time
}

// WorkerLoad is one worker's report.
type WorkerLoad struct {
	WorkerID uint64
	// Sequence increases with every report of one reporter.
	Sequence uint64
	// Time is the reporter's clock when it read the load.
	Time  time.Time
	Flags LoadFlags
	// KVCapacityBlocks is the worker's declared KV capacity (LoadKV, > 0).
	KVCapacityBlocks uint64
	Serving          ServingLoad
}

// Bounds of the load values (docs/protocol.md §6). A value above its bound
// is malformed: it can only come from a counter that underflowed or a
// hostile sender, and a router must never rank a DC by it. A pool's sums
// saturate at the bounds (AddLoad), so a relay's own window never exceeds
// them.
const (
	MaxLoadRequests uint64 = 1 << 32 // running, waiting
	MaxLoadTokens   uint64 = 1 << 40 // active prefill tokens
	MaxLoadBlocks   uint64 = 1 << 40 // KV used and capacity blocks, active decode blocks
	MaxLoadWorkers  uint64 = 1 << 20 // KV and serving workers
)

// AddLoad is a + b saturating at limit (a load sum never wraps).
func AddLoad(a, b, limit uint64) uint64 {
	s := a + b
	if s < a { // wrapped past 2^64
		return limit
	}
	return min(s, limit)
}

// checkBound refuses a value above its bound.
func checkBound(v, bound uint64, field string) error {
	if v > bound {
		return decodeErr(ErrMalformed, field, "%d is above the bound %d", v, bound)
	}
	return nil
}

const (
	poolLoadFields   = 17
	workerLoadFields = 11
)

func checkTime(t time.Time, field string) error {
	if t.Before(time.Unix(0, 0)) || t.After(time.Unix(0, math.MaxInt64)) {
		return decodeErr(ErrMalformed, field, "%v is outside 1970..2262", t)
	}
	return nil
}

// checkZeroUnless refuses a value given without its flag (one encoding per
// message: an unknown value is 0).
func checkZeroUnless(set bool, v uint64, field string) error {
	if !set && v != 0 {
		return decodeErr(ErrMalformed, field, "%d without its presence flag", v)
	}
	return nil
}

func checkServing(f LoadFlags, s *ServingLoad, prefix string) error {
	for _, c := range []struct {
		flag  LoadFlags
		v     uint64
		bound uint64
		name  string
	}{
		{LoadRequests, s.Running, MaxLoadRequests, "running"}, {LoadRequests, s.Waiting, MaxLoadRequests, "waiting"},
		{LoadPrefill, s.ActivePrefillTokens, MaxLoadTokens, "active_prefill_tokens"},
		{LoadDecode, s.ActiveDecodeBlocks, MaxLoadBlocks, "active_decode_blocks"},
	} {
		if err := checkZeroUnless(f.Has(c.flag), c.v, prefix+c.name); err != nil {
			return err
		}
		if err := checkBound(c.v, c.bound, prefix+c.name); err != nil {
			return err
		}
	}
	return nil
}

func checkFlags(f LoadFlags, field string) error {
	if f&^loadFlagsAll != 0 {
		return decodeErr(ErrUnknownEnum, field, "unknown flag bits %#x", uint64(f&^loadFlagsAll))
	}
	if f.Has(LoadPrefillEstimated) && !f.Has(LoadPrefill) {
		return decodeErr(ErrMalformed, field, "prefill estimated without the prefill flag")
	}
	return nil
}

func checkPoolLoad(p *PoolLoad) error {
	if err := checkIdentity(&p.Identity); err != nil {
		return err
	}
	if err := checkLease(&p.Lease); err != nil {
		return err
	}
	if err := checkTime(p.Time, "load.time"); err != nil {
		return err
	}
	if err := checkFlags(p.Flags, "load.flags"); err != nil {
		return err
	}
	kv := p.Flags.Has(LoadKV)
	if kv && p.KVCapacityBlocks == 0 {
		return decodeErr(ErrMalformed, "load.kv_capacity_blocks", "0 with the KV flag: a capacity of 0 is unknown")
	}
	for _, c := range []struct {
		v     uint64
		bound uint64
		name  string
	}{{p.KVUsedBlocks, MaxLoadBlocks, "load.kv_used_blocks"}, {p.KVCapacityBlocks, MaxLoadBlocks, "load.kv_capacity_blocks"},
		{p.KVWorkers, MaxLoadWorkers, "load.kv_workers"}} {
		if err := checkZeroUnless(kv, c.v, c.name); err != nil {
			return err
		}
		if err := checkBound(c.v, c.bound, c.name); err != nil {
			return err
		}
	}
	if err := checkBound(p.ServingWorkers, MaxLoadWorkers, "load.serving_workers"); err != nil {
		return err
	}
	if err := checkServing(p.Flags, &p.Serving, "load."); err != nil {
		return err
	}
	serving := p.Flags&LoadServing != 0
	if serving && p.ServingWorkers == 0 {
		return decodeErr(ErrMalformed, "load.serving_workers", "0 with serving load")
	}
	if err := checkZeroUnless(serving, p.ServingWorkers, "load.serving_workers"); err != nil {
		return err
	}
	if !serving && !p.ServingTime.IsZero() {
		return decodeErr(ErrMalformed, "load.serving_time", "set without serving load")
	}
	if serving {
		return checkTime(p.ServingTime, "load.serving_time")
	}
	return nil
}

func unixNanos(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

// AppendPoolLoad appends the encoding of p to dst. On error it returns dst
// unchanged and an *EncodeError.
func AppendPoolLoad(dst []byte, p *PoolLoad) ([]byte, error) {
	if err := checkPoolLoad(p); err != nil {
		return dst, asEncodeError(err)
	}
	dst = appendPreamble(dst, KindPoolLoad, poolLoadFields, &p.Identity, &p.Lease)
	for _, v := range [...]uint64{p.WindowSequence, unixNanos(p.Time), p.WindowMs, uint64(p.Flags),
		p.KVUsedBlocks, p.KVCapacityBlocks, p.KVWorkers,
		p.Serving.Running, p.Serving.Waiting, p.Serving.ActivePrefillTokens, p.Serving.ActiveDecodeBlocks,
		p.ServingWorkers, unixNanos(p.ServingTime)} {
		dst = appendUint(dst, v)
	}
	return dst, nil
}

// readTime reads Unix nanoseconds; zero gives the zero time when zeroOK.
func (r *reader) time(field string, zeroOK bool) (time.Time, error) {
	ns, err := r.uint(field)
	if err != nil {
		return time.Time{}, err
	}
	if ns > math.MaxInt64 {
		return time.Time{}, decodeErr(ErrMalformed, field, "%d ns is past 2262", ns)
	}
	if ns == 0 && zeroOK {
		return time.Time{}, nil
	}
	return time.Unix(0, int64(ns)).UTC(), nil
}

// DecodePoolLoad decodes one pool load window. See DecodePoolLoadInto.
func DecodePoolLoad(b []byte) (PoolLoad, error) {
	var p PoolLoad
	err := DecodePoolLoadInto(b, &p)
	return p, err
}

// DecodePoolLoadInto decodes one pool load window into p. On error it
// returns a *DecodeError and p's contents are unspecified.
func DecodePoolLoadInto(b []byte, p *PoolLoad) error {
	r := reader{b: b}
	if err := r.preamble(KindPoolLoad, poolLoadFields, &p.Identity, &p.Lease); err != nil {
		return err
	}
	var err error
	if p.WindowSequence, err = r.uint("load.window_sequence"); err != nil {
		return err
	}
	if p.Time, err = r.time("load.time", false); err != nil {
		return err
	}
	if p.WindowMs, err = r.uint("load.window_ms"); err != nil {
		return err
	}
	f, err := r.uint("load.flags")
	if err != nil {
		return err
	}
	p.Flags = LoadFlags(f)
	for _, dst := range [...]struct {
		v    *uint64
		name string
	}{{&p.KVUsedBlocks, "load.kv_used_blocks"}, {&p.KVCapacityBlocks, "load.kv_capacity_blocks"}, {&p.KVWorkers, "load.kv_workers"},
		{&p.Serving.Running, "load.running"}, {&p.Serving.Waiting, "load.waiting"},
		{&p.Serving.ActivePrefillTokens, "load.active_prefill_tokens"}, {&p.Serving.ActiveDecodeBlocks, "load.active_decode_blocks"},
		{&p.ServingWorkers, "load.serving_workers"}} {
		if *dst.v, err = r.uint(dst.name); err != nil {
			return err
		}
	}
	if p.ServingTime, err = r.time("load.serving_time", true); err != nil {
		return err
	}
	if err := r.end(); err != nil {
		return err
	}
	return checkPoolLoad(p)
}

func checkWorkerLoad(w *WorkerLoad) error {
	if err := checkTime(w.Time, "worker_load.time"); err != nil {
		return err
	}
	if err := checkFlags(w.Flags, "worker_load.flags"); err != nil {
		return err
	}
	kv := w.Flags.Has(LoadKV)
	if kv && w.KVCapacityBlocks == 0 {
		return decodeErr(ErrMalformed, "worker_load.kv_capacity_blocks", "0 with the KV flag: a capacity of 0 is unknown")
	}
	if err := checkZeroUnless(kv, w.KVCapacityBlocks, "worker_load.kv_capacity_blocks"); err != nil {
		return err
	}
	if err := checkBound(w.KVCapacityBlocks, MaxLoadBlocks, "worker_load.kv_capacity_blocks"); err != nil {
		return err
	}
	return checkServing(w.Flags, &w.Serving, "worker_load.")
}

// AppendWorkerLoad appends the encoding of w to dst. On error it returns
// dst unchanged and an *EncodeError.
func AppendWorkerLoad(dst []byte, w *WorkerLoad) ([]byte, error) {
	if err := checkWorkerLoad(w); err != nil {
		return dst, asEncodeError(err)
	}
	dst = appendHeader(dst, KindWorkerLoad, workerLoadFields)
	for _, v := range [...]uint64{w.WorkerID, w.Sequence, unixNanos(w.Time), uint64(w.Flags), w.KVCapacityBlocks,
		w.Serving.Running, w.Serving.Waiting, w.Serving.ActivePrefillTokens, w.Serving.ActiveDecodeBlocks} {
		dst = appendUint(dst, v)
	}
	return dst, nil
}

// DecodeWorkerLoad decodes one worker load report. See DecodeWorkerLoadInto.
func DecodeWorkerLoad(b []byte) (WorkerLoad, error) {
	var w WorkerLoad
	err := DecodeWorkerLoadInto(b, &w)
	return w, err
}

// DecodeWorkerLoadInto decodes one worker load report into w. On error it
// returns a *DecodeError and w's contents are unspecified.
func DecodeWorkerLoadInto(b []byte, w *WorkerLoad) error {
	r := reader{b: b}
	if err := r.header(KindWorkerLoad, workerLoadFields); err != nil {
		return err
	}
	var err error
	if w.WorkerID, err = r.uint("worker_load.worker_id"); err != nil {
		return err
	}
	if w.Sequence, err = r.uint("worker_load.sequence"); err != nil {
		return err
	}
	if w.Time, err = r.time("worker_load.time", false); err != nil {
		return err
	}
	f, err := r.uint("worker_load.flags")
	if err != nil {
		return err
	}
	w.Flags = LoadFlags(f)
	for _, dst := range [...]struct {
		v    *uint64
		name string
	}{{&w.KVCapacityBlocks, "worker_load.kv_capacity_blocks"},
		{&w.Serving.Running, "worker_load.running"}, {&w.Serving.Waiting, "worker_load.waiting"},
		{&w.Serving.ActivePrefillTokens, "worker_load.active_prefill_tokens"}, {&w.Serving.ActiveDecodeBlocks, "worker_load.active_decode_blocks"}} {
		if *dst.v, err = r.uint(dst.name); err != nil {
			return err
		}
	}
	if err := r.end(); err != nil {
		return err
	}
	return checkWorkerLoad(w)
}

// Load plane subjects: outside ckf.> (the lane stream would store them, and
// a publish there would move the lane fence) and outside kvevents.> (the
// input stream).
const (
	// LoadSubjectPrefix starts every load subject.
	LoadSubjectPrefix = "ckfload"
	// PoolLoadSubjectT is ckfload.<domain>.<dc>.pool.
	PoolLoadSubjectT = "ckfload.%s.%s.pool"
	// PoolLoadFilterT is ckfload.<domain>.*.pool, every pool of a domain.
	PoolLoadFilterT = "ckfload.%s.*.pool"
	// WorkerLoadSubjectT is ckfload.<domain>.<dc>.worker.<worker_id>.
	WorkerLoadSubjectT = "ckfload.%s.%s.worker.%d"
	// WorkerLoadFilterT is ckfload.<domain>.<dc>.worker.*.
	WorkerLoadFilterT = "ckfload.%s.%s.worker.*"
)

// PoolLoadSubject is ckfload.<domain>.<dc>.pool.
func PoolLoadSubject(domain, dc string) (string, error) {
	if err := validatePool(domain, dc); err != nil {
		return "", err
	}
	return LoadSubjectPrefix + "." + domain + "." + dc + ".pool", nil
}

// PoolLoadFilter is ckfload.<domain>.*.pool.
func PoolLoadFilter(domain string) (string, error) {
	if err := ValidateToken("domain", domain); err != nil {
		return "", err
	}
	return LoadSubjectPrefix + "." + domain + ".*.pool", nil
}

// ParsePoolLoadSubject returns the DC of ckfload.<domain>.<dc>.pool.
func ParsePoolLoadSubject(subject, domain string) (string, error) {
	prefix := LoadSubjectPrefix + "." + domain + "."
	rest, ok := cutPrefix(subject, prefix)
	dc, ok2 := cutSuffix(rest, ".pool")
	if !ok || !ok2 {
		return "", &TokenError{What: "load subject", Token: subject, Reason: "want " + prefix + "<dc>.pool"}
	}
	if err := ValidateToken("dc", dc); err != nil {
		return "", err
	}
	return dc, nil
}

// WorkerLoadSubject is ckfload.<domain>.<dc>.worker.<worker_id>.
func WorkerLoadSubject(domain, dc string, workerID uint64) (string, error) {
	if err := validatePool(domain, dc); err != nil {
		return "", err
	}
	return LoadSubjectPrefix + "." + domain + "." + dc + ".worker." + strconv.FormatUint(workerID, 10), nil
}

// WorkerLoadFilter is ckfload.<domain>.<dc>.worker.*.
func WorkerLoadFilter(domain, dc string) (string, error) {
	if err := validatePool(domain, dc); err != nil {
		return "", err
	}
	return LoadSubjectPrefix + "." + domain + "." + dc + ".worker.*", nil
}

// ParseWorkerLoadSubject returns the worker id of
// ckfload.<domain>.<dc>.worker.<worker_id>.
func ParseWorkerLoadSubject(subject, domain, dc string) (uint64, error) {
	prefix := LoadSubjectPrefix + "." + domain + "." + dc + ".worker."
	id, ok := cutPrefix(subject, prefix)
	if !ok {
		return 0, &TokenError{What: "worker load subject", Token: subject, Reason: "want " + prefix + "<worker_id>"}
	}
	v, err := strconv.ParseUint(id, 10, 64)
	if err != nil || strconv.FormatUint(v, 10) != id {
		return 0, &TokenError{What: "worker id", Token: id, Reason: "not a canonical decimal u64"}
	}
	return v, nil
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) < len(p) || s[:len(p)] != p {
		return s, false
	}
	return s[len(p):], true
}

func cutSuffix(s, p string) (string, bool) {
	if len(s) < len(p) || s[len(s)-len(p):] != p {
		return s, false
	}
	return s[:len(s)-len(p)], true
}

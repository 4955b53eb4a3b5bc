package bridge

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// ErrBadEngine is wrapped by every engine-spec parse error.
var ErrBadEngine = errors.New("bridge: bad engine spec")

// EngineSpec is one engine (one publisher: instance × data-parallel rank)
// the bridge subscribes to, parsed from
// WORKER_ID=PUB_ENDPOINT[,replay=REPLAY_ENDPOINT][,rank=N][,topic=PREFIX].
type EngineSpec struct {
	WorkerID uint64
	// Pub is the engine's live endpoint. An endpoint with "*" or "::" is
	// bound by the bridge (the engine then connects to it); any other is
	// dialled.
	Pub string
	// Replay is the engine's replay ROUTER endpoint ("" = no replay: gaps
	// and restarts cannot be repaired, only reported).
	Replay string
	// DPRank is used when a batch does not carry its rank.
	DPRank uint32
	// Topic is the SUB prefix filter ("" = everything).
	Topic string
	// Metrics is the engine's Prometheus endpoint (http(s)://HOST:PORT/metrics)
	// the bridge scrapes for the worker's serving load ("" = none).
	Metrics string
}

func (s EngineSpec) String() string {
	out := strconv.FormatUint(s.WorkerID, 10) + "=" + s.Pub
	if s.Replay != "" {
		out += ",replay=" + s.Replay
	}
	if s.DPRank != 0 {
		out += ",rank=" + strconv.FormatUint(uint64(s.DPRank), 10)
	}
	if s.Topic != "" {
		out += ",topic=" + s.Topic
	}
	if s.Metrics != "" {
		out += ",metrics=" + s.Metrics
	}
	return out
}

// ParseEngine parses one --engine value.
func ParseEngine(v string) (EngineSpec, error) {
	v = strings.TrimSpace(v)
	id, rest, ok := strings.Cut(v, "=")
	if !ok {
		return EngineSpec{}, fmt.Errorf("%w %q: want WORKER_ID=PUB_ENDPOINT[,replay=ENDPOINT]", ErrBadEngine, v)
	}
	w, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
	if err != nil {
		return EngineSpec{}, fmt.Errorf("%w %q: worker id: %w", ErrBadEngine, v, err)
	}
	parts := strings.Split(rest, ",")
	s := EngineSpec{WorkerID: w, Pub: strings.TrimSpace(parts[0])}
	if err := checkEndpoint(s.Pub); err != nil {
		return EngineSpec{}, fmt.Errorf("%w %q: %w", ErrBadEngine, v, err)
	}
	for _, p := range parts[1:] {
		k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			return EngineSpec{}, fmt.Errorf("%w %q: option %q is not key=value", ErrBadEngine, v, p)
		}
		switch k {
		case "replay":
			if err := checkEndpoint(val); err != nil {
				return EngineSpec{}, fmt.Errorf("%w %q: replay: %w", ErrBadEngine, v, err)
			}
			s.Replay = val
		case "rank":
			r, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return EngineSpec{}, fmt.Errorf("%w %q: rank: %w", ErrBadEngine, v, err)
			}
			s.DPRank = uint32(r)
		case "topic":
			s.Topic = val
		case "metrics":
			u, err := url.Parse(val)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return EngineSpec{}, fmt.Errorf("%w %q: metrics: want http(s)://HOST:PORT/PATH", ErrBadEngine, v)
			}
			s.Metrics = val
		default:
			return EngineSpec{}, fmt.Errorf("%w %q: unknown option %q", ErrBadEngine, v, k)
		}
	}
	return s, nil
}

func checkEndpoint(ep string) error {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok || addr == "" {
		return fmt.Errorf("endpoint %q: want tcp://HOST:PORT or ipc://PATH", ep)
	}
	switch scheme {
	case "tcp":
		if i := strings.LastIndexByte(addr, ':'); i < 0 || i == len(addr)-1 {
			return fmt.Errorf("endpoint %q: missing port", ep)
		}
	case "ipc":
	default:
		return fmt.Errorf("endpoint %q: unsupported transport %q", ep, scheme)
	}
	return nil
}

// ParseEngines reads one engine spec per line; blank lines and lines
// starting with # are skipped.
func ParseEngines(r io.Reader) ([]EngineSpec, error) {
	var out []EngineSpec
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		s, err := ParseEngine(t)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read engines: %w", err)
	}
	return out, nil
}

// validate rejects a list with two specs for one endpoint.
func validate(specs []EngineSpec) error {
	if len(specs) == 0 {
		return fmt.Errorf("%w: no engines configured", ErrBadEngine)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.Pub] {
			return fmt.Errorf("%w: endpoint %s listed twice", ErrBadEngine, s.Pub)
		}
		seen[s.Pub] = true
	}
	return nil
}

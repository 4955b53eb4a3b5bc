package main

import (
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/domains"
	"github.com/ckfrelay/ckfrelay/pkg/follow"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/client"
)

// kvrelayOptions are the --kvrelay-* flags: lanes followed over Dynamo's
// dynamo.kvrelay.v1 gRPC protocol (docs/kvrelay.md), next to the NATS lanes.
type kvrelayOptions struct {
	sources      listFlag
	model        string
	models       listFlag
	blockSize    uint
	acceptLegacy bool
	tlsCA        string
	tlsCert      string
	tlsKey       string
	serverName   string
	staleAfter   time.Duration
	frameTimeout time.Duration
}

// listFlag is a repeatable flag held as a comma-separated list (which is
// also how the environment variable sets several); a string keeps the
// options comparable.
type listFlag string

func (l *listFlag) String() string { return string(*l) }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if *l != "" {
				*l += ","
			}
			*l += listFlag(s)
		}
	}
	return nil
}

func (l listFlag) values() []string {
	if l == "" {
		return nil
	}
	return strings.Split(string(l), ",")
}

func (k *kvrelayOptions) register(fs *flag.FlagSet) {
	fs.Var(&k.sources, "kvrelay-source", "follow a Dynamo dynamo.kvrelay.v1 relay as lane NAME: NAME=HOST:PORT (repeatable, or comma-separated; the sources take lanes 15, 14, ...)")
	fs.StringVar(&k.model, "kvrelay-model", "", "canonical model id (or alias) whose pool each --kvrelay-source follows into the default domain; required with --kvrelay-source unless --kvrelay-models is given")
	fs.Var(&k.models, "kvrelay-models", "follow these models (canonical ids or aliases; repeatable or comma-separated), or '*' every model the sources' catalogs list, each into a domain of its own named after the model (characters outside [A-Za-z0-9_-] become _); excludes --kvrelay-model")
	fs.UintVar(&k.blockSize, "kvrelay-block-size", 0, "KV block size in tokens of the queries; a relay pool of another kv_block_size is refused; required with --kvrelay-model (with --kvrelay-models, 0 takes each model's from the catalog)")
	fs.BoolVar(&k.acceptLegacy, "kvrelay-accept-legacy", true, "also follow a pool whose only role is LEGACY (role-less workers, as ckfrelay's relay declares) when no AGGREGATED pool registers the model")
	fs.StringVar(&k.tlsCA, "kvrelay-tls-ca", "", "CA file verifying the relays (TLS; empty with no other --kvrelay-tls-* flag: plaintext, the protocol's default)")
	fs.StringVar(&k.tlsCert, "kvrelay-tls-cert", "", "client certificate file presented to the relays (mTLS; needs --kvrelay-tls-key)")
	fs.StringVar(&k.tlsKey, "kvrelay-tls-key", "", "client key file of --kvrelay-tls-cert")
	fs.StringVar(&k.serverName, "kvrelay-server-name", "", "TLS server name verified on the relays (empty: the host of each address)")
	fs.DurationVar(&k.staleAfter, "kvrelay-stale-after", follow.DefaultKvRelayStaleAfter, "mark a kvrelay lane stale when no frame (heartbeats included) arrived for this long")
	fs.DurationVar(&k.frameTimeout, "kvrelay-frame-timeout", client.DefaultFrameTimeout, "invalidate and resubscribe a kvrelay pool stream that sends nothing for this long")
}

// config builds the indexer's kvrelay config, checking the flags.
func (k *kvrelayOptions) config() (follow.KvRelayConfig, error) {
	out := follow.KvRelayConfig{Model: k.model, BlockSize: uint32(k.blockSize), AcceptLegacy: k.acceptLegacy,
		StaleAfter: k.staleAfter, FrameTimeout: k.frameTimeout}
	tlsSet := k.tlsCA != "" || k.tlsCert != "" || k.tlsKey != "" || k.serverName != ""
	if len(k.sources) == 0 {
		if k.model != "" || k.models != "" || k.blockSize != 0 || tlsSet {
			return out, fmt.Errorf("--kvrelay-model, --kvrelay-models, --kvrelay-block-size and --kvrelay-tls-* need --kvrelay-source")
		}
		return out, nil
	}
	for _, s := range k.sources.values() {
		name, addr, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return out, fmt.Errorf("--kvrelay-source %q: want NAME=HOST:PORT", s)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return out, fmt.Errorf("--kvrelay-source %q: want NAME=HOST:PORT: %w", s, err)
		}
		out.Sources = append(out.Sources, follow.KvRelaySource{Name: name, Addr: addr})
	}
	switch {
	case k.models != "" && k.model != "":
		return out, fmt.Errorf("--kvrelay-model (one model, the default domain) and --kvrelay-models (each model its own domain) are exclusive")
	case k.models != "":
		if k.blockSize > 1<<31 {
			return out, fmt.Errorf("--kvrelay-block-size %d is too large", k.blockSize)
		}
		if l := k.models.values(); slices.Contains(l, "*") && len(l) > 1 {
			return out, fmt.Errorf("--kvrelay-models: '*' follows every model; list no other")
		}
	case strings.ContainsAny(k.model, ",*"):
		return out, fmt.Errorf("--kvrelay-model %q: one model; --kvrelay-models follows several, or '*' every model, each into its own domain", k.model)
	case k.model == "":
		return out, fmt.Errorf("--kvrelay-model (or --kvrelay-models) is required with --kvrelay-source")
	case k.blockSize == 0 || k.blockSize > 1<<31:
		return out, fmt.Errorf("--kvrelay-block-size is required with --kvrelay-source (the block size of the queries, in tokens)")
	}
	switch {
	case k.staleAfter <= 0 || k.frameTimeout <= 0:
		return out, fmt.Errorf("--kvrelay-stale-after and --kvrelay-frame-timeout want positive durations")
	}
	if tlsSet {
		tc, err := client.LoadTLS(k.tlsCA, k.tlsCert, k.tlsKey, k.serverName)
		if err != nil {
			return out, fmt.Errorf("--kvrelay-tls-*: %w", err)
		}
		out.TLS = tc
	}
	return out, nil
}

// modelDomains is the registry's kvrelay models: kv (config's) followed per
// model, when --kvrelay-models is given; else none.
func (k *kvrelayOptions) modelDomains(kv follow.KvRelayConfig) domains.KvRelayModels {
	if k.models == "" {
		return domains.KvRelayModels{}
	}
	out := domains.KvRelayModels{KvRelay: kv}
	if k.models == "*" {
		out.All = true
	} else {
		out.Models = k.models.values()
	}
	return out
}

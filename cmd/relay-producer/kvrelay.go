package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckfrelay/ckfrelay/internal/pools"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
)

// kvrelayOptions are the --kvrelay-* flags: serving the pool over Dynamo's
// dynamo.kvrelay.v1 gRPC protocol (docs/kvrelay.md).
type kvrelayOptions struct {
	listen    string
	model     string
	source    string
	aliases   listFlag
	roles     listFlag
	endpoint  string
	blockSize uint
	heartbeat time.Duration
	tlsCert   string
	tlsKey    string
	clientCA  string

	// text is the flags' pool metadata: the pool's with one pool, the
	// defaults of the pools' kvrelay blocks with --pools-file.
	text server.PoolText
	cfg  server.Config
}

// listFlag is a repeatable flag; each value may also be a comma-separated
// list (which is how the environment variable sets several).
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func (k *kvrelayOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&k.listen, "kvrelay-listen", "", "serve Dynamo's dynamo.kvrelay.v1 gRPC relay protocol on HOST:PORT so a Dynamo Global Router can use this DC; with --pools-file one catalog lists every pool (empty: off)")
	fs.StringVar(&k.model, "kvrelay-model", "", "canonical model id of the pool: the served name routers look it up by; required with --kvrelay-listen (with --pools-file: set per pool)")
	fs.StringVar(&k.source, "kvrelay-source-path", "", "the model card's source path (e.g. the Hugging Face repo id the weights come from), from which the pool's cache-semantics digest is derived as Dynamo derives it; pools of one source path share an indexer domain whatever their served names (default: --kvrelay-model)")
	fs.Var(&k.aliases, "kvrelay-alias", "extra model name the router may look the pool up by (repeatable, or comma-separated)")
	fs.Var(&k.roles, "kvrelay-roles", "pool roles the pool's card declares: AGGREGATED (the default, the role Dynamo's Global Router follows), PREFILL, DECODE, ENCODE, or LEGACY alone for a role-less card (repeatable, or comma-separated; with --pools-file: the default of pools whose kvrelay block sets none)")
	fs.StringVar(&k.endpoint, "kvrelay-endpoint", "", "serving endpoint NAMESPACE/COMPONENT/ENDPOINT of the pool's workers; required with --kvrelay-listen (with --pools-file: the default of pools whose kvrelay block sets none)")
	fs.UintVar(&k.blockSize, "kvrelay-block-size", 0, "KV block size in tokens of the pool's workers (kv_block_size); required with --kvrelay-listen (with --pools-file: the default of pools whose kvrelay block sets none)")
	fs.DurationVar(&k.heartbeat, "kvrelay-heartbeat", 10*time.Second, "pool, catalog and readiness heartbeat interval of dynamo.kvrelay.v1 streams")
	fs.StringVar(&k.tlsCert, "kvrelay-tls-cert", "", "TLS certificate file of the dynamo.kvrelay.v1 listener (empty: plaintext)")
	fs.StringVar(&k.tlsKey, "kvrelay-tls-key", "", "TLS key file of the dynamo.kvrelay.v1 listener")
	fs.StringVar(&k.clientCA, "kvrelay-client-ca", "", "CA file clients of the dynamo.kvrelay.v1 listener must present a certificate of (mTLS; needs --kvrelay-tls-cert)")
}

// kvFlags names the flag of each server.PoolText field.
var kvFlags = map[string]string{"model": "--kvrelay-model", "endpoint": "--kvrelay-endpoint", "block_size": "--kvrelay-block-size",
	"roles": "--kvrelay-roles", "descriptor": "--kvrelay-model/--kvrelay-source-path/--kvrelay-alias/--kvrelay-endpoint"}

// flagError names the flag a server.PoolTextError is about.
func flagError(err error) error {
	var te *server.PoolTextError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: %w", kvFlags[te.Field], te.Err)
	}
	return err
}

// validate checks the flags and, when the service is on, sets cfg.KvRelay
// (one pool) or, with pooled (--pools-file), the defaults of the pools'
// kvrelay blocks: endpoint, block size and roles, while the model, source
// path and aliases name one model and are set per pool.
func (k *kvrelayOptions) validate(cfg *relay.Config, pooled bool) error {
	if k.listen == "" {
		for name, v := range map[string]string{"--kvrelay-model": k.model, "--kvrelay-source-path": k.source, "--kvrelay-endpoint": k.endpoint, "--kvrelay-tls-cert": k.tlsCert, "--kvrelay-roles": k.roles.String()} {
			if v != "" {
				return fmt.Errorf("%s needs --kvrelay-listen", name)
			}
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(k.listen); err != nil {
		return fmt.Errorf("--kvrelay-listen %q: want HOST:PORT: %w", k.listen, err)
	}
	k.text = server.PoolText{Model: k.model, SourcePath: k.source, Aliases: k.aliases, Roles: k.roles, Endpoint: k.endpoint, BlockSize: uint64(k.blockSize)}
	if pooled {
		for name, v := range map[string]string{"--kvrelay-model": k.model, "--kvrelay-source-path": k.source, "--kvrelay-alias": k.aliases.String()} {
			if v != "" {
				return fmt.Errorf("%s names one model: with --pools-file set it per pool (the pool's kvrelay block)", name)
			}
		}
		// Checked even when every pool's block sets its own roles.
		if _, err := server.ParseRoles(k.roles); err != nil {
			return fmt.Errorf("--kvrelay-roles: %w", err)
		}
	} else {
		if k.model == "" {
			return errors.New("--kvrelay-model is required with --kvrelay-listen")
		}
		spec, err := k.text.Spec()
		if err != nil {
			return flagError(err)
		}
		cfg.KvRelay = &spec
	}
	k.cfg = server.DefaultConfig()
	k.cfg.PoolHeartbeat, k.cfg.CatalogHeartbeat, k.cfg.ReadinessHeartbeat = k.heartbeat, k.heartbeat, k.heartbeat
	switch {
	case (k.tlsCert == "") != (k.tlsKey == ""):
		return errors.New("--kvrelay-tls-cert and --kvrelay-tls-key go together")
	case k.clientCA != "" && k.tlsCert == "":
		return errors.New("--kvrelay-client-ca needs --kvrelay-tls-cert and --kvrelay-tls-key")
	case k.tlsCert != "":
		tc, err := server.LoadTLS(k.tlsCert, k.tlsKey, k.clientCA)
		if err != nil {
			return err
		}
		k.cfg.TLS = tc
	}
	if err := k.cfg.Validate(); err != nil {
		return fmt.Errorf("--kvrelay-heartbeat: %w", err)
	}
	return nil
}

// start serves pub (nil: no pool yet, for AddPool); the returned stop
// shuts the server down.
func (k *kvrelayOptions) start(pub server.Publication, reg prometheus.Registerer, log zerolog.Logger) (srv *server.Server, stop func(), err error) {
	k.cfg.Logger, k.cfg.Metrics = log, reg
	srv, err = server.New(pub, k.cfg)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", k.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--kvrelay-listen: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil {
			log.Error().Err(err).Msg("dynamo.kvrelay.v1 server stopped")
		}
	}()
	return srv, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}

// checkPools checks the pools file's kvrelay metadata: with --kvrelay-listen
// every declared pool's (its block over the flags' defaults) must validate
// and no two pools may have one pool id (one catalog lists a pool once);
// without it a kvrelay block is refused, as the --kvrelay-* flags are.
func (k *kvrelayOptions) checkPools(f pools.File) error {
	if k.listen == "" {
		for _, p := range f.Pools {
			if p.KvRelay != nil {
				return fmt.Errorf("pool %s: a kvrelay block needs --kvrelay-listen", p.Domain)
			}
		}
		return nil
	}
	if len(f.Allow) > 0 {
		// A discovered pool is served with the domain as its model and the
		// flags' defaults: they must make a valid pool on their own.
		probe := pools.PoolSpec{Domain: "probe"}
		if _, err := probe.KvRelaySpec(k.text); err != nil {
			return fmt.Errorf("allow: discovered pools are served over kvrelay with the flags' endpoint and block size: %w", flagError(err))
		}
	}
	format := ckf.NewFormatIdentity(ckf.DefaultSeed, 1024)
	byID := map[kvrelay.ProducerKey]string{}
	for _, p := range f.Pools {
		spec, err := p.KvRelaySpec(k.text)
		if err != nil {
			return err
		}
		gen, err := spec.Generation(1, 1, 1, format)
		if err != nil {
			return fmt.Errorf("pool %s: kvrelay: %w", p.Domain, err)
		}
		if other, dup := byID[gen.Key]; dup {
			return fmt.Errorf("pools %s and %s have one kvrelay pool id (the same source path, block size and endpoint)", other, p.Domain)
		}
		byID[gen.Key] = p.Domain
	}
	return nil
}

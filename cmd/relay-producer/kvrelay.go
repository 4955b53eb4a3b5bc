package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	kvrelayv1 "github.com/ckfrelay/ckfrelay/dynamo/kvrelay/v1"
	"github.com/ckfrelay/ckfrelay/internal/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/internal/relay"
	"github.com/prometheus/client_golang/prometheus"
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

	spec server.PoolSpec
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
	fs.StringVar(&k.listen, "kvrelay-listen", "", "serve Dynamo's dynamo.kvrelay.v1 gRPC relay protocol on HOST:PORT so a Dynamo Global Router can use this DC (empty: off)")
	fs.StringVar(&k.model, "kvrelay-model", "", "canonical model id of the pool: the served name routers look it up by; required with --kvrelay-listen")
	fs.StringVar(&k.source, "kvrelay-source-path", "", "the model card's source path (e.g. the Hugging Face repo id the weights come from), from which the pool's cache-semantics digest is derived as Dynamo derives it; pools of one source path share an indexer domain whatever their served names (default: --kvrelay-model)")
	fs.Var(&k.aliases, "kvrelay-alias", "extra model name the router may look the pool up by (repeatable, or comma-separated)")
	fs.Var(&k.roles, "kvrelay-roles", "pool roles the pool's card declares: AGGREGATED (the default, the role Dynamo's Global Router follows), PREFILL, DECODE, ENCODE, or LEGACY alone for a role-less card (repeatable, or comma-separated)")
	fs.StringVar(&k.endpoint, "kvrelay-endpoint", "", "serving endpoint NAMESPACE/COMPONENT/ENDPOINT of the pool's workers; required with --kvrelay-listen")
	fs.UintVar(&k.blockSize, "kvrelay-block-size", 0, "KV block size in tokens of the pool's workers (kv_block_size); required with --kvrelay-listen")
	fs.DurationVar(&k.heartbeat, "kvrelay-heartbeat", 10*time.Second, "pool, catalog and readiness heartbeat interval of dynamo.kvrelay.v1 streams")
	fs.StringVar(&k.tlsCert, "kvrelay-tls-cert", "", "TLS certificate file of the dynamo.kvrelay.v1 listener (empty: plaintext)")
	fs.StringVar(&k.tlsKey, "kvrelay-tls-key", "", "TLS key file of the dynamo.kvrelay.v1 listener")
	fs.StringVar(&k.clientCA, "kvrelay-client-ca", "", "CA file clients of the dynamo.kvrelay.v1 listener must present a certificate of (mTLS; needs --kvrelay-tls-cert)")
}

// validate checks the flags and, when the service is on, sets cfg.KvRelay.
func (k *kvrelayOptions) validate(cfg *relay.Config) error {
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
	if k.model == "" {
		return errors.New("--kvrelay-model is required with --kvrelay-listen")
	}
	parts := strings.Split(k.endpoint, "/")
	if len(parts) != 3 {
		return fmt.Errorf("--kvrelay-endpoint %q: want NAMESPACE/COMPONENT/ENDPOINT", k.endpoint)
	}
	if k.blockSize == 0 || k.blockSize > 1<<31 {
		return fmt.Errorf("--kvrelay-block-size %d: set the workers' KV block size (1..2^31)", k.blockSize)
	}
	roles, err := parseRoles(k.roles)
	if err != nil {
		return err
	}
	k.spec = server.PoolSpec{Model: k.model, SourcePath: k.source, Aliases: k.aliases, Namespace: parts[0], Component: parts[1], Endpoint: parts[2],
		BlockSize: uint32(k.blockSize), Roles: roles}
	if err := k.spec.Validate(); err != nil {
		return fmt.Errorf("--kvrelay-model/--kvrelay-source-path/--kvrelay-alias/--kvrelay-endpoint: %w", err)
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
	spec := k.spec
	cfg.KvRelay = &spec
	return nil
}

// start serves the relay's publication; the returned stop shuts it down.
func (k *kvrelayOptions) start(r *relay.Relay, reg prometheus.Registerer, log zerolog.Logger) (stop func(), err error) {
	k.cfg.Logger, k.cfg.Metrics = log, reg
	srv, err := server.New(r.Publication(), k.cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", k.listen)
	if err != nil {
		return nil, fmt.Errorf("--kvrelay-listen: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil {
			log.Error().Err(err).Msg("dynamo.kvrelay.v1 server stopped")
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}

// parseRoles maps --kvrelay-roles to WorkerRoles: AGGREGATED when none is
// given, since Dynamo's Global Router subscribes only to pools declaring
// it. Names are case-insensitive, with or without the WORKER_ROLE_
// prefix; LEGACY (a card without a role) cannot be combined.
func parseRoles(names []string) ([]kvrelayv1.WorkerRole, error) {
	if len(names) == 0 {
		return []kvrelayv1.WorkerRole{kvrelayv1.WorkerRole_WORKER_ROLE_AGGREGATED}, nil
	}
	var roles []kvrelayv1.WorkerRole
	for _, n := range names {
		key := strings.ToUpper(n)
		if !strings.HasPrefix(key, "WORKER_ROLE_") {
			key = "WORKER_ROLE_" + key
		}
		v, ok := kvrelayv1.WorkerRole_value[key]
		r := kvrelayv1.WorkerRole(v)
		switch {
		case !ok || r == kvrelayv1.WorkerRole_WORKER_ROLE_UNSPECIFIED:
			return nil, fmt.Errorf("--kvrelay-roles: unknown role %q (want AGGREGATED, PREFILL, DECODE, ENCODE or LEGACY)", n)
		case slices.Contains(roles, r):
			return nil, fmt.Errorf("--kvrelay-roles: %s given twice", n)
		}
		roles = append(roles, r)
	}
	if len(roles) > 1 && slices.Contains(roles, kvrelayv1.WorkerRole_WORKER_ROLE_LEGACY) {
		return nil, errors.New("--kvrelay-roles: LEGACY stands for a card without a role and cannot be combined with others")
	}
	return roles, nil
}

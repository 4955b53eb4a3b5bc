// Package auth renders the per-role NATS permissions of ckfrelay
// (accounts.conf.tmpl) into nats-server config blocks: one account "CKF"
// whose users are the workers, relays, indexer and query clients of one
// domain, each allowed exactly what its role needs. The rendered block is
// included by a server config (see deploy/nats-*-secure.conf) or passed to an
// embedded server with --nats-config.
package authconf

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/ckfrelay/ckfrelay/pkg/lease"
)

//go:embed accounts.conf.tmpl
var accountsTmpl string

// Roles.
const (
	RoleWorker  = "worker"
	RoleRelay   = "relay"
	RoleIndexer = "indexer"
	RoleQuery   = "query"
)

// User is one account user.
type User struct {
	Name     string
	Password string
	Role     string
	// DC is the relay's DC (RoleRelay).
	DC string
	// DCs are the DCs a worker publishes for (RoleWorker; a simulator
	// such as the trace replayer may stand for workers of several DCs).
	DCs []string
	// Query also lets a worker request ckfq.<domain>.match (RoleWorker
	// only: the trace replayer both publishes and verifies).
	Query bool
}

// Params describe one server's account.
type Params struct {
	Domain string
	// Domains are further domains (models) whose grants every user gets
	// exactly as it does Domain's: one relay process runs a pool per model
	// (--pools-file), one indexer serves several (--domain a,b), and the
	// trace replayer works and queries for each.
	Domains []string
	// JSDomain is empty on the server that holds JetStream; on a leaf
	// server whose clients use --js-domain D it is D, and every JetStream
	// subject is prefixed with $JS.D.API.
	JSDomain string
	// JetStream enables JetStream for the account (the server holding it).
	JetStream bool
	// InputJSDomain is set on a DC leaf server that holds the DC's own
	// input stream KVEVENTS in that JetStream domain (relays run with
	// --input-js-domain <it>): the account gets JetStream, relays' input
	// grants use $JS.<it>.API and workers may ensure the local stream.
	InputJSDomain string
	Users         []User
}

// ErrInvalidParams is wrapped by every Render validation error.
var ErrInvalidParams = errors.New("auth: invalid parameters")

// Render returns the accounts block for p.
func Render(p Params) (string, error) {
	domains := append([]string{p.Domain}, p.Domains...)
	seenDomain := map[string]bool{}
	for _, d := range domains {
		if err := lease.ValidateName(d); err != nil {
			return "", fmt.Errorf("%w: domain: %w", ErrInvalidParams, err)
		}
		if seenDomain[d] {
			return "", fmt.Errorf("%w: domain %q twice", ErrInvalidParams, d)
		}
		seenDomain[d] = true
	}
	if p.JSDomain != "" {
		if err := lease.ValidateName(p.JSDomain); err != nil {
			return "", fmt.Errorf("%w: js domain: %w", ErrInvalidParams, err)
		}
	}
	if p.InputJSDomain != "" {
		if err := lease.ValidateName(p.InputJSDomain); err != nil {
			return "", fmt.Errorf("%w: input js domain: %w", ErrInvalidParams, err)
		}
		if p.InputJSDomain == p.JSDomain {
			return "", fmt.Errorf("%w: input js domain %q equals the js domain", ErrInvalidParams, p.InputJSDomain)
		}
	}
	seen := map[string]bool{}
	for _, u := range p.Users {
		if err := validateUser(u); err != nil {
			return "", err
		}
		if seen[u.Name] {
			return "", fmt.Errorf("%w: user %q twice", ErrInvalidParams, u.Name)
		}
		seen[u.Name] = true
	}
	view := struct {
		Params
		API, Put  string
		InputAPIs []string
		// Domains shadows Params.Domains: Domain and the further ones.
		Domains []string
	}{Params: p, API: "$JS.API", Domains: domains}
	if p.JSDomain != "" {
		view.API = "$JS." + p.JSDomain + ".API"
		view.Put = view.API + "."
	}
	view.InputAPIs = []string{view.API}
	if p.InputJSDomain != "" {
		// The server maps $JS.<d>.API onto its local $JS.API and checks
		// the publish permission on both subjects.
		view.InputAPIs = []string{"$JS." + p.InputJSDomain + ".API", "$JS.API"}
	}
	t, err := template.New("accounts").Funcs(template.FuncMap{"join": strings.Join}).Parse(accountsTmpl)
	if err != nil {
		return "", fmt.Errorf("auth: template: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, view); err != nil {
		return "", fmt.Errorf("auth: render: %w", err)
	}
	return b.String(), nil
}

func validateUser(u User) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: user %q: %s", ErrInvalidParams, u.Name, fmt.Sprintf(format, a...))
	}
	if err := lease.ValidateName(u.Name); err != nil {
		return bad("name: %v", err)
	}
	if u.Query && u.Role != RoleWorker {
		return bad("only a worker takes Query (a %q may not)", u.Role)
	}
	// The password is written inside a quoted config string.
	if u.Password == "" || strings.ContainsAny(u.Password, "\"\\\n\r$") {
		return bad("password must be non-empty without quotes, backslashes, '$' or newlines")
	}
	switch u.Role {
	case RoleRelay:
		if err := lease.ValidateName(u.DC); err != nil {
			return bad("dc: %v", err)
		}
	case RoleWorker:
		if len(u.DCs) == 0 {
			return bad("a worker needs at least one DC")
		}
		for _, dc := range u.DCs {
			if err := lease.ValidateName(dc); err != nil {
				return bad("dc: %v", err)
			}
		}
	case RoleIndexer, RoleQuery:
	default:
		return bad("unknown role %q", u.Role)
	}
	return nil
}

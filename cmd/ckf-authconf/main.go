// Command ckf-authconf renders the per-role NATS permissions of ckfrelay
// (deploy/auth) for one domain, or several (--domain a,b: processes that
// serve several models), into an accounts block to include in a
// nats-server config:
//
//	ckf-authconf --domain prod --jetstream \
//	  --user indexer:indexer:/run/secrets/indexer.pw \
//	  --user query:query:/run/secrets/query.pw > hub-accounts.conf
//	ckf-authconf --domain prod --js-domain hub \
//	  --user relay-eu:relay:eu:/run/secrets/relay-eu.pw \
//	  --user worker-eu:worker:eu:/run/secrets/worker-eu.pw > eu-accounts.conf
//
// A --user is NAME:ROLE[:DC[,DC...]]:PASSWORD_FILE with ROLE one of worker,
// relay, indexer, query (relay takes one DC, worker one or more). The
// password is read from the file and written into the output, which must
// then be protected like the file.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ckfrelay/ckfrelay/internal/authconf"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type userList []string

func (u *userList) String() string     { return strings.Join(*u, " ") }
func (u *userList) Set(v string) error { *u = append(*u, v); return nil }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ckf-authconf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var p authconf.Params
	var users userList
	var domains string
	fs.StringVar(&domains, "domain", "", "ckfrelay domain, or a comma-separated list: every user gets its grants in each (required)")
	fs.StringVar(&p.JSDomain, "js-domain", "", "JetStream domain the clients of this server use with --js-domain (a DC leaf server)")
	fs.BoolVar(&p.JetStream, "jetstream", false, "enable JetStream for the account (the server holding the streams)")
	fs.Var(&users, "user", "NAME:ROLE[:DC[,DC...]]:PASSWORD_FILE (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if ds := strings.Split(domains, ","); len(ds) > 0 {
		p.Domain, p.Domains = ds[0], ds[1:]
	}
	for _, spec := range users {
		u, err := parseUser(spec)
		if err != nil {
			fmt.Fprintf(stderr, "ckf-authconf: --user %q: %v\n", spec, err)
			return 2
		}
		p.Users = append(p.Users, u)
	}
	out, err := authconf.Render(p)
	if err != nil {
		fmt.Fprintf(stderr, "ckf-authconf: %v\n", err)
		return 2
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		fmt.Fprintf(stderr, "ckf-authconf: %v\n", err)
		return 1
	}
	return 0
}

func parseUser(spec string) (authconf.User, error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 3 || len(parts) > 4 {
		return authconf.User{}, errors.New("want NAME:ROLE[:DC[,DC...]]:PASSWORD_FILE")
	}
	u := authconf.User{Name: parts[0], Role: parts[1]}
	file := parts[len(parts)-1]
	if len(parts) == 4 {
		dcs := strings.Split(parts[2], ",")
		switch u.Role {
		case authconf.RoleRelay:
			if len(dcs) != 1 {
				return authconf.User{}, errors.New("a relay serves one DC")
			}
			u.DC = dcs[0]
		case authconf.RoleWorker:
			u.DCs = dcs
		default:
			return authconf.User{}, fmt.Errorf("role %q takes no DC", u.Role)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return authconf.User{}, fmt.Errorf("password file: %w", err)
	}
	u.Password = strings.TrimRight(string(b), "\r\n")
	return u, nil
}

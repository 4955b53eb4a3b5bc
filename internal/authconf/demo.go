package authconf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DemoDomain, DemoJSDomain and DemoDCs are the names of the docker-compose
// deployment the shipped *-accounts.conf files are rendered for.
const (
	DemoDomain   = "demo"
	DemoJSDomain = "hub"
)

// DemoModels are the further domains of the compose deployment: its relays
// run a pool for DemoDomain and one for each of these (deploy/pools.yaml),
// its indexers serve them all.
var DemoModels = []string{"demo-2"}

// DemoDCs are the DCs of the compose deployment.
var DemoDCs = []string{"dc-a", "dc-b"}

// DemoFiles renders the shipped account files, keyed by their name in
// deploy/auth, with the DEMO passwords read from secretsDir
// (<user>.password).
func DemoFiles(secretsDir string) (map[string]string, error) {
	pw := func(user string) (string, error) {
		b, err := os.ReadFile(filepath.Join(secretsDir, user+".password"))
		if err != nil {
			return "", fmt.Errorf("auth: demo password: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	mk := func(name, role, dc string, dcs []string) (User, error) {
		p, err := pw(name)
		return User{Name: name, Password: p, Role: role, DC: dc, DCs: dcs}, err
	}
	mkQuery := func(name string, dcs []string) (User, error) {
		u, err := mk(name, RoleWorker, "", dcs)
		u.Query = true
		return u, err
	}
	var errs []error
	must := func(u User, err error) User {
		errs = append(errs, err)
		return u
	}
	hub := Params{Domain: DemoDomain, Domains: DemoModels, JetStream: true, Users: []User{
		must(mk("indexer", RoleIndexer, "", nil)),
		must(mk("query", RoleQuery, "", nil)),
		// The trace replayer simulates the workers of every DC and
		// verifies over the indexers' NATS queue group.
		must(mkQuery("replayer", DemoDCs)),
	}}
	out := map[string]string{}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	s, err := Render(hub)
	if err != nil {
		return nil, err
	}
	out["hub-accounts.conf"] = s
	for _, dc := range DemoDCs {
		// Each DC leaf holds its own KVEVENTS in JetStream domain <dc>;
		// the replayer publishes there as a worker of that DC.
		p := Params{Domain: DemoDomain, Domains: DemoModels, JSDomain: DemoJSDomain, InputJSDomain: dc}
		for _, u := range []struct{ name, role string }{{"relay-" + dc, RoleRelay}, {"worker-" + dc, RoleWorker}, {"replayer", RoleWorker}} {
			usr, err := mk(u.name, u.role, dc, []string{dc})
			if err != nil {
				return nil, err
			}
			p.Users = append(p.Users, usr)
		}
		if s, err = Render(p); err != nil {
			return nil, err
		}
		out[dc+"-accounts.conf"] = s
	}
	return out, nil
}

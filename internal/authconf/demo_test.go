package authconf

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the shipped *-accounts.conf files from the template")

// The shipped files live with the rest of the deployment, two levels up.
const (
	deployDir  = "../../deploy"
	shippedDir = deployDir + "/auth"
	secretsDir = deployDir + "/secrets/demo"
)

// The shipped account files are exactly the template rendered for the
// compose deployment: edit the template, then run with -update.
func TestDemoFilesUpToDate(t *testing.T) {
	files, err := DemoFiles(secretsDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		if *update {
			if err := os.WriteFile(filepath.Join(shippedDir, name), []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(filepath.Join(shippedDir, name))
		if err != nil {
			t.Fatalf("%v (run go test ./internal/authconf -run TestDemoFilesUpToDate -update)", err)
		}
		if string(got) != want {
			t.Errorf("deploy/auth/%s differs from the rendered template; run go test ./internal/authconf -run TestDemoFilesUpToDate -update", name)
		}
	}
}

func TestRenderRejectsBadParams(t *testing.T) {
	for name, p := range map[string]Params{
		"bad domain":     {Domain: "a.b"},
		"quote in pw":    {Domain: "d", Users: []User{{Name: "u", Password: `x"y`, Role: RoleQuery}}},
		"unknown role":   {Domain: "d", Users: []User{{Name: "u", Password: "p", Role: "admin"}}},
		"relay no dc":    {Domain: "d", Users: []User{{Name: "u", Password: "p", Role: RoleRelay}}},
		"worker no dc":   {Domain: "d", Users: []User{{Name: "u", Password: "p", Role: RoleWorker}}},
		"wildcard dc":    {Domain: "d", Users: []User{{Name: "u", Password: "p", Role: RoleRelay, DC: ">"}}},
		"duplicate user": {Domain: "d", Users: []User{{Name: "u", Password: "p", Role: RoleQuery}, {Name: "u", Password: "p", Role: RoleQuery}}},
		"bad input js":   {Domain: "d", JSDomain: "hub", InputJSDomain: "a.b"},
		"input js = js":  {Domain: "d", JSDomain: "hub", InputJSDomain: "hub"},
		"query on relay": {Domain: "d", Users: []User{{Name: "u", Password: "p", Role: RoleRelay, DC: "x", Query: true}}},
	} {
		if _, err := Render(p); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: err %v, want ErrInvalidParams", name, err)
		}
	}
}

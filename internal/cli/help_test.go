package cli

import (
	"bytes"
	"errors"
	"flag"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestUsageGroupsFlagsAndNamesTheirVariables(t *testing.T) {
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	var c Common
	c.Register(fs)
	fs.String("nats-test-future", "", "a future NATS flag") // placed by its prefix, unregistered
	fs.String("domain", "default", "indexer domain")        // identity
	fs.Duration("publish-interval", time.Second, "publish period")
	fs.Bool("json", false, "JSON report")
	Usage(fs, "does one thing well", map[string]string{"json": GroupObservability})
	if err := Parse(fs, []string{"--help"}, envOf(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	if first, _, _ := strings.Cut(help, "\n"); first != "tool: does one thing well" {
		t.Fatalf("first line %q", first)
	}
	sections := map[string]int{}
	for _, g := range []string{"Connection:", "Identity:", "Tuning:", "Observability:", "General:"} {
		sections[g] = strings.Index(help, "\n"+g+"\n")
		if sections[g] < 0 {
			t.Fatalf("no %s section:\n%s", g, help)
		}
	}
	sectionOf := func(flagName string) string {
		at := strings.Index(help, "  --"+flagName+" ")
		if at < 0 {
			at = strings.Index(help, "  --"+flagName+"\n")
		}
		best, bestAt := "", -1
		for g, i := range sections {
			if i < at && i > bestAt {
				best, bestAt = g, i
			}
		}
		return best
	}
	for name, want := range map[string]string{
		"nats-url": "Connection:", "nats-test-future": "Connection:", "nats-creds": "Connection:", "js-domain": "Connection:", "js-replicas": "Tuning:",
		"domain": "Identity:", "publish-interval": "Tuning:",
		"log-level": "Observability:", "otlp-endpoint": "Observability:", "trace-sample-ratio": "Observability:",
		"json": "Observability:", "version": "General:",
	} {
		if got := sectionOf(name); got != want {
			t.Errorf("--%s under %q, want %q", name, got, want)
		}
	}
	for _, want := range []string{
		"--nats-url string  [$CKFRELAY_NATS_URL]", "--nats-test-future string  [$CKFRELAY_NATS_TEST_FUTURE]",
		"--publish-interval duration  [$CKFRELAY_PUBLISH_INTERVAL]", `(default "default")`, "(default 1s)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "CKFRELAY_VERSION") {
		t.Error("--version must not be settable from the environment")
	}
}

func TestVersionFlagPrintsAndEndsParsing(t *testing.T) {
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := Parse(fs, []string{"--version"}, envOf(nil))
	if !errors.Is(err, ErrVersion) || !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--version: %v", err)
	}
	if !strings.HasPrefix(out.String(), "tool "+Version()+" (go") {
		t.Fatalf("printed %q", out.String())
	}
	// An image's CKFRELAY_VERSION label must not turn a run into a print.
	fs = flag.NewFlagSet("tool", flag.ContinueOnError)
	if err := Parse(fs, nil, envOf(map[string]string{"CKFRELAY_VERSION": "true"})); err != nil {
		t.Fatalf("CKFRELAY_VERSION: %v", err)
	}
}

// --check-config is set on the command line only: a stray environment
// variable must not turn a server into a pre-flight that exits at once.
func TestCheckConfigIsNotReadFromTheEnvironment(t *testing.T) {
	for _, args := range [][]string{nil, {"--check-config"}} {
		var c Common
		fs := flag.NewFlagSet("tool", flag.ContinueOnError)
		c.Register(fs)
		if err := Parse(fs, args, envOf(map[string]string{"CKFRELAY_CHECK_CONFIG": "true"})); err != nil {
			t.Fatal(err)
		}
		if want := args != nil; c.CheckConfig != want {
			t.Fatalf("args %q: CheckConfig = %v, want %v", args, c.CheckConfig, want)
		}
	}
}

func TestVersionSources(t *testing.T) {
	info := func(main string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Version: main}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, c := range []struct {
		linked string
		read   func() (*debug.BuildInfo, bool)
		want   string
	}{
		{"v1.2.0", none, "v1.2.0"},
		{"", none, "devel"},
		{"", info("(devel)"), "devel"},
		{"", info("v0.3.1"), "v0.3.1"},
		{"v1.2.0", info("v0.3.1", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "true"), "v1.2.0+0123456789ab.dirty"},
		{"", info("(devel)", "vcs.revision", "abc", "vcs.modified", "false"), "devel+abc"},
	} {
		if got := versionFrom(c.linked, c.read); got != c.want {
			t.Errorf("versionFrom(%q) = %q want %q", c.linked, got, c.want)
		}
	}
}

package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Flag groups, in the order --help lists them.
const (
	GroupConnection    = "connection"
	GroupIdentity      = "identity"
	GroupTuning        = "tuning"
	GroupObservability = "observability"
	GroupGeneral       = "general"
)

var groupOrder = []string{GroupConnection, GroupIdentity, GroupTuning, GroupObservability, GroupGeneral}

// flagGroups places the flags the binaries share. A flag listed nowhere is
// placed by groupByPrefix, else in tuning; a command passes overrides to
// Usage for its own exceptions.
var flagGroups = map[string]string{
	"nats-url": GroupConnection, "js-domain": GroupConnection, "nats-port": GroupConnection,
	"store-dir": GroupConnection, "indexer-url": GroupConnection, "input-js-domain": GroupConnection,
	"js-replicas": GroupTuning, "input-js-replicas": GroupTuning, "upload-min-rate": GroupTuning,
	"domain": GroupIdentity, "dc": GroupIdentity, "dcs": GroupIdentity, "instance": GroupIdentity,
	"expected-blocks": GroupIdentity, "seed": GroupIdentity, "mode": GroupIdentity,
	"http-addr": GroupObservability, "status-interval": GroupObservability, "pprof-addr": GroupObservability,
	"version": GroupGeneral, "help": GroupGeneral, checkConfigFlag: GroupGeneral,
}

// groupByPrefix places families of flags, so that a new flag of a family
// (NATS credentials and TLS, OTLP settings) needs no registration.
var groupByPrefix = []struct{ prefix, group string }{
	{"nats-", GroupConnection}, {"tls-", GroupConnection}, {"js-", GroupConnection},
	{"log-", GroupObservability}, {"otlp-", GroupObservability}, {"trace-", GroupObservability},
	{"metrics-", GroupObservability},
}

// GroupOf returns the --help group of a flag; overrides win.
func GroupOf(name string, overrides map[string]string) string {
	if g, ok := overrides[name]; ok {
		return g
	}
	if g, ok := flagGroups[name]; ok {
		return g
	}
	for _, p := range groupByPrefix {
		if strings.HasPrefix(name, p.prefix) {
			return p.group
		}
	}
	return GroupTuning
}

// ErrVersion is returned by Parse after --version printed the version. It
// matches flag.ErrHelp, so a command that exits 0 after --help does so
// after --version too.
var ErrVersion = fmt.Errorf("%w: version printed", flag.ErrHelp)

// versionFlag is the flag Parse adds to every command.
const versionFlag = "version"

// checkConfigFlag is Common's pre-flight flag (Run).
const checkConfigFlag = "check-config"

// notFromEnv are the flags no environment variable sets: CKFRELAY_VERSION
// is a common image label and must not turn a server into a version print,
// nor a stray CKFRELAY_CHECK_CONFIG a server into a pre-flight.
var notFromEnv = map[string]bool{versionFlag: true, checkConfigFlag: true}

// Usage makes fs's --help print summary (one line), then every flag under
// its group with the CKFRELAY_ variable that sets it. overrides maps flag
// names to groups for a command's own exceptions to GroupOf.
func Usage(fs *flag.FlagSet, summary string, overrides map[string]string) {
	addVersionFlag(fs)
	fs.Usage = func() { WriteUsage(fs.Output(), fs, summary, overrides) }
}

func addVersionFlag(fs *flag.FlagSet) {
	if fs.Lookup(versionFlag) == nil {
		fs.Bool(versionFlag, false, "print the version and exit")
	}
}

// WriteUsage writes the grouped help of fs to w.
func WriteUsage(w io.Writer, fs *flag.FlagSet, summary string, overrides map[string]string) {
	fmt.Fprintf(w, "%s: %s\n\nUsage: %s [flags]\n\n", fs.Name(), summary, fs.Name())
	fmt.Fprintf(w, "Every flag may also be set by the environment variable shown after it (%s<FLAG>);\na flag on the command line wins.\n", EnvPrefix)
	byGroup := map[string][]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) {
		g := GroupOf(f.Name, overrides)
		byGroup[g] = append(byGroup[g], f)
	})
	for _, g := range groupOrder {
		flags := byGroup[g]
		if len(flags) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", strings.ToUpper(g[:1])+g[1:])
		for _, f := range flags {
			writeFlag(w, f)
		}
	}
	fmt.Fprintf(w, "\n  -h, --help\n        print this help and exit\n")
}

func writeFlag(w io.Writer, f *flag.Flag) {
	typ, usage := flag.UnquoteUsage(f)
	line := "  --" + f.Name
	if typ != "" {
		line += " " + typ
	}
	if !notFromEnv[f.Name] {
		line += "  [$" + EnvName(f.Name) + "]"
	}
	fmt.Fprintf(w, "%s\n        %s", line, usage)
	if def := f.DefValue; def != "" && def != "false" && def != "0" {
		fmt.Fprintf(w, " (default %s)", quoteIfString(f, def))
	}
	fmt.Fprintln(w)
}

func quoteIfString(f *flag.Flag, def string) string {
	if typ, _ := flag.UnquoteUsage(f); typ == "string" {
		return fmt.Sprintf("%q", def)
	}
	return def
}

// HandleVersion prints the version and returns ErrVersion when --version was
// given (for a command that parses with fs.Parse rather than Parse).
func HandleVersion(fs *flag.FlagSet) error {
	f := fs.Lookup(versionFlag)
	if f == nil {
		return nil
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return nil
	}
	if on, _ := g.Get().(bool); !on {
		return nil
	}
	PrintVersion(fs.Output(), fs.Name())
	return ErrVersion
}

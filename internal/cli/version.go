package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at link time for release builds:
//
//	go build -ldflags "-X github.com/ckfrelay/ckfrelay/internal/cli.version=v1.2.0" ./cmd/...
//
// Left empty, Version falls back to the build information Go embeds.
var version string

// Version is the binary's version: the link-time value, else the main
// module's version (a `go install module@version` build), else "devel";
// the VCS revision is appended when the build recorded one.
func Version() string {
	return versionFrom(version, debug.ReadBuildInfo)
}

func versionFrom(linked string, read func() (*debug.BuildInfo, bool)) string {
	v := linked
	info, ok := read()
	if v == "" {
		v = "devel"
		if ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
	}
	if !ok {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += "+" + rev
		if modified == "true" {
			v += ".dirty"
		}
	}
	return v
}

// PrintVersion writes the line --version prints.
func PrintVersion(w io.Writer, binary string) {
	fmt.Fprintf(w, "%s %s (%s, %s/%s)\n", binary, Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

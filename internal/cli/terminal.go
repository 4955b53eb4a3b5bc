package cli

import (
	"io"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// IsTerminal reports whether w is a terminal (a file whose descriptor is a
// tty). Pipes, files, buffers and /dev/null are not, so output meant for a
// person (colours, a status line rewritten in place) stays off logs and CI.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && isatty.IsTerminal(f.Fd())
}

// ConsoleWriter is zerolog's human-readable format on w with timeFormat,
// coloured only when w is a terminal.
func ConsoleWriter(w io.Writer, timeFormat string) zerolog.ConsoleWriter {
	return zerolog.ConsoleWriter{Out: w, TimeFormat: timeFormat, NoColor: !IsTerminal(w)}
}

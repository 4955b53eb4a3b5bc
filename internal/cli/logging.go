package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// Log schema shared by every ckfrelay binary (JSON keys; the console format
// shows the same keys):
//
//	time      UTC wall clock with millisecond precision (TimeFormatMillis)
//	level     debug, info, warn, error
//	service   the binary (relay-producer, global-indexer)
//	msg       the message
//	domain, dc, lane, epoch, instance, addr
//	          the same names wherever these appear
//	*_ms      durations, in milliseconds (zerolog's Dur unit)
//	error     the error of Err
//
// Every binary logs to stderr; stdout is for a command's own output.
const TimeFormatMillis = "2006-01-02T15:04:05.000Z07:00"

// Logger builds the zerolog logger the flags ask for, writing to w, with
// the service field set.
func (c *Common) Logger(w io.Writer, service string) (zerolog.Logger, error) {
	return newLogger(w, c.LogLevel, c.LogFormat, service, time.Now)
}

func newLogger(w io.Writer, level, format, service string, now func() time.Time) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("invalid --log-level %q (want debug, info, warn, error)", level)
	}
	switch format {
	case "json":
	case "console":
		w = ConsoleWriter(w, "15:04:05.000")
	default:
		return zerolog.Nop(), fmt.Errorf("invalid --log-format %q (want console or json)", format)
	}
	// The timestamp is written by a hook rather than zerolog's Timestamp,
	// whose format is a package-wide setting of zerolog.
	l := zerolog.New(w).Level(lvl).Hook(msTimestamp(now))
	if service != "" {
		l = l.With().Str("service", service).Logger()
	}
	return l, nil
}

// msTimestamp stamps every event with TimeFormatMillis.
type msTimestamp func() time.Time

func (h msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, h().UTC().Format(TimeFormatMillis))
}

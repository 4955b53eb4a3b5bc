package natsembed

import (
	"fmt"
	"io"
	"sync"
)

// logger adapts nats-server's Logger to a LineWriter and remembers the
// first fatal message so RunOptions can fail fast with it instead of the
// process exiting. Safe for concurrent use.
type logger struct {
	out LineWriter

	mu       sync.Mutex // guards fatalMsg
	fatalMsg string
}

func newLogger(out LineWriter) *logger { return &logger{out: out} }

func (l *logger) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalMsg
}

func (l *logger) emit(level, format string, v []any) {
	if l.out != nil {
		l.out.WriteLine(level, fmt.Sprintf(format, v...))
	}
}

func (l *logger) Noticef(format string, v ...any) { l.emit("info", format, v) }
func (l *logger) Warnf(format string, v ...any)   { l.emit("warn", format, v) }
func (l *logger) Errorf(format string, v ...any)  { l.emit("error", format, v) }
func (l *logger) Debugf(format string, v ...any)  { l.emit("debug", format, v) }
func (l *logger) Tracef(format string, v ...any)  { l.emit("trace", format, v) }

func (l *logger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.fatalMsg == "" {
		l.fatalMsg = msg
	}
	l.mu.Unlock()
	if l.out != nil {
		l.out.WriteLine("fatal", msg)
	}
}

// WriterLines returns a LineWriter printing "[level] line" to w, serialised
// so concurrent server goroutines do not interleave lines.
func WriterLines(w io.Writer) LineWriter { return &writerLines{w: w} }

type writerLines struct {
	mu sync.Mutex // guards writes to w
	w  io.Writer
}

func (w *writerLines) WriteLine(level, line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.w, "[%s] %s\n", level, line)
}

// LineFunc adapts a function to LineWriter; it must be safe for concurrent
// use.
type LineFunc func(level, line string)

// WriteLine calls f.
func (f LineFunc) WriteLine(level, line string) { f(level, line) }

package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The external load generator publishes a batch from its own process, so
// the measuring process's CPU time (and a CPU profile of it) holds the
// server, the relays and the indexer alone; the generator reports its own
// CPU time per batch. It speaks a line protocol on its stdin and stdout:
//
//	L <n>\n then n records (u32 subject length, subject, u32 data length, data)  → OK
//	G raw|pipe\n  publish the loaded batch (raw: to the baseline's subjects), wait for every ack → D <cpu ns>
//	Q\n           exit
//
// Failures answer E <message>.

// maxGeneratorRecord bounds one record's subject and data: the parent is
// trusted, but a torn pipe must not make the child allocate gigabytes.
const maxGeneratorRecord = 64 << 20

// extGenerator is the parent's side of a running generator process.
type extGenerator struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	in     *bufio.Writer
	out    *bufio.Reader
	loaded *Batch
}

func startGenerator(argv []string, url string) (*extGenerator, error) {
	cmd := exec.Command(argv[0], append(append([]string{}, argv[1:]...), url)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start generator: %w", err)
	}
	return &extGenerator{cmd: cmd, stdin: stdin, in: bufio.NewWriterSize(stdin, 1<<20), out: bufio.NewReader(stdout)}, nil
}

// reply reads one answer line: D/OK with its argument, or E as an error.
func (g *extGenerator) reply(want string) (string, error) {
	line, err := g.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("bench: generator: %w", err)
	}
	line = strings.TrimSuffix(line, "\n")
	kind, arg, _ := strings.Cut(line, " ")
	switch kind {
	case want:
		return arg, nil
	case "E":
		return "", fmt.Errorf("bench: generator: %s", arg)
	}
	return "", fmt.Errorf("bench: generator answered %q, want %s", line, want)
}

// load sends b to the generator unless it holds it already (untimed).
func (g *extGenerator) load(b *Batch) error {
	if g.loaded == b {
		return nil
	}
	fmt.Fprintf(g.in, "L %d\n", len(b.Msgs))
	var hdr [4]byte
	for _, m := range b.Msgs {
		binary.LittleEndian.PutUint32(hdr[:], uint32(len(m.Subject)))
		g.in.Write(hdr[:])
		g.in.WriteString(m.Subject)
		binary.LittleEndian.PutUint32(hdr[:], uint32(len(m.Data)))
		g.in.Write(hdr[:])
		g.in.Write(m.Data)
	}
	if err := g.in.Flush(); err != nil {
		return fmt.Errorf("bench: generator load: %w", err)
	}
	if _, err := g.reply("OK"); err != nil {
		return err
	}
	g.loaded = b
	return nil
}

// publish has the generator publish the loaded batch and returns the
// generator's CPU time for it.
func (g *extGenerator) publish(raw bool) (time.Duration, error) {
	mode := "pipe"
	if raw {
		mode = "raw"
	}
	fmt.Fprintf(g.in, "G %s\n", mode)
	if err := g.in.Flush(); err != nil {
		return 0, fmt.Errorf("bench: generator: %w", err)
	}
	arg, err := g.reply("D")
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(arg, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bench: generator cpu %q: %w", arg, err)
	}
	return time.Duration(ns), nil
}

func (g *extGenerator) close() error {
	fmt.Fprintf(g.in, "Q\n")
	_ = g.in.Flush()
	_ = g.stdin.Close()
	return g.cmd.Wait()
}

// RunGenerator is the generator process's side: it connects to url and
// serves the line protocol on in and out until Q or the end of in.
func RunGenerator(ctx context.Context, url string, in io.Reader, out io.Writer) error {
	nc, err := nats.Connect(url, nats.Name("ckf-bench-generator"))
	if err != nil {
		return fmt.Errorf("bench: generator connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return err
	}
	r, w := bufio.NewReaderSize(in, 1<<20), bufio.NewWriter(out)
	answer := func(format string, a ...any) error {
		fmt.Fprintf(w, format+"\n", a...)
		return w.Flush()
	}
	var msgs []BatchMsg
	for {
		line, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		cmd, arg, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		switch cmd {
		case "Q":
			return nil
		case "L":
			n, err := strconv.Atoi(arg)
			if err != nil || n < 0 {
				return fmt.Errorf("bench: generator: bad load %q", arg)
			}
			if msgs, err = readRecords(r, n); err != nil {
				return err
			}
			if err := answer("OK"); err != nil {
				return err
			}
		case "G":
			subj := func(s string) string { return s }
			if arg == "raw" {
				subj = rawSubject
			}
			cpu0 := processCPU()
			if err := publishBatch(ctx, js, msgs, subj, time.Minute); err != nil {
				if err := answer("E %s", strings.ReplaceAll(err.Error(), "\n", " ")); err != nil {
					return err
				}
				continue
			}
			if err := answer("D %d", int64(processCPU()-cpu0)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("bench: generator: unknown command %q", cmd)
		}
	}
}

func readRecords(r *bufio.Reader, n int) ([]BatchMsg, error) {
	msgs := make([]BatchMsg, 0, n)
	field := func() ([]byte, error) {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		size := binary.LittleEndian.Uint32(hdr[:])
		if size > maxGeneratorRecord {
			return nil, fmt.Errorf("bench: generator: record of %d bytes", size)
		}
		b := make([]byte, size)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	for range n {
		s, err := field()
		if err != nil {
			return nil, err
		}
		d, err := field()
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, BatchMsg{Subject: string(s), Data: d})
	}
	return msgs, nil
}

// publishBatch publishes msgs (subjects rewritten by subj) asynchronously
// and waits for every ack; when the 1024 outstanding publishes stall for
// longer than nats.go waits (a loaded machine), it waits for the
// outstanding acks and tries again instead of failing, up to timeout.
func publishBatch(ctx context.Context, js jetstream.JetStream, msgs []BatchMsg, subj func(string) string, timeout time.Duration) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		var f jetstream.PubAckFuture
		for {
			var err error
			f, err = js.PublishAsync(subj(m.Subject), m.Data)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return fmt.Errorf("bench: publish: %w", err)
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(timeout):
				return fmt.Errorf("bench: publish: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("bench: publish ack: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

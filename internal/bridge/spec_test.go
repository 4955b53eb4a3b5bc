package bridge

import (
	"errors"
	"strings"
	"testing"
)

func TestParseEngine(t *testing.T) {
	good := map[string]EngineSpec{
		"7=tcp://10.0.0.5:5557":                              {WorkerID: 7, Pub: "tcp://10.0.0.5:5557"},
		"7=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558":   {WorkerID: 7, Pub: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558"},
		" 8=tcp://*:5557,rank=2,topic=kv@ ":                  {WorkerID: 8, Pub: "tcp://*:5557", DPRank: 2, Topic: "kv@"},
		"9=ipc:///tmp/kv.sock,replay=ipc:///tmp/replay.sock": {WorkerID: 9, Pub: "ipc:///tmp/kv.sock", Replay: "ipc:///tmp/replay.sock"},
	}
	for in, want := range good {
		got, err := ParseEngine(in)
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", in, got, err, want)
		}
		if again, err := ParseEngine(got.String()); err != nil || again != got {
			t.Errorf("%q: String() does not round-trip: %q", in, got.String())
		}
	}
	for _, in := range []string{"", "tcp://x:1", "x=tcp://h:1", "-1=tcp://h:1", "1=http://h:1", "1=tcp://h",
		"1=tcp://h:1,replay", "1=tcp://h:1,replay=udp://h:2", "1=tcp://h:1,rank=x", "1=tcp://h:1,color=red"} {
		if _, err := ParseEngine(in); !errors.Is(err, ErrBadEngine) {
			t.Errorf("%q: err=%v, want ErrBadEngine", in, err)
		}
	}
}

func TestParseEngines(t *testing.T) {
	specs, err := ParseEngines(strings.NewReader("# engines\n1=tcp://a:5557,replay=tcp://a:5558\n\n2=tcp://b:5557\n"))
	if err != nil || len(specs) != 2 || specs[1].WorkerID != 2 {
		t.Fatalf("got %+v, %v", specs, err)
	}
	if _, err := ParseEngines(strings.NewReader("1=tcp://a:5557\nbad\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v", err)
	}
	if err := validate(append(specs, specs[0])); !errors.Is(err, ErrBadEngine) {
		t.Fatalf("duplicate endpoint accepted: %v", err)
	}
	if err := validate(nil); !errors.Is(err, ErrBadEngine) {
		t.Fatalf("empty list accepted: %v", err)
	}
}

func TestBindMode(t *testing.T) {
	for ep, want := range map[string]bool{"tcp://*:5557": true, "tcp://[::]:5557": true, "tcp://10.0.0.5:5557": false} {
		if bindMode(ep) != want {
			t.Errorf("%s: bind=%v", ep, !want)
		}
	}
}

func TestParseReplyLayouts(t *testing.T) {
	seq7 := []byte{0, 0, 0, 0, 0, 0, 0, 7}
	end := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	cases := []struct {
		name    string
		frames  [][]byte
		seq     uint64
		end, ok bool
	}{
		{"A batch", [][]byte{{}, seq7, {0x90}}, 7, false, true},
		{"B batch", [][]byte{{}, []byte("kv@"), seq7, {0x90}}, 7, false, true},
		{"A end", [][]byte{{}, end, {}}, 0, true, true},
		{"B end", [][]byte{{}, {}, end, {}}, 0, true, true},
		{"short seq", [][]byte{{}, {7}, {0x90}}, 0, false, false},
		{"one frame", [][]byte{{}, seq7}, 0, false, false},
		{"five frames", [][]byte{{}, {}, {}, seq7, {0x90}}, 0, false, false},
	}
	for _, c := range cases {
		seq, payload, end, err := parseReply(c.frames)
		if (err == nil) != c.ok || seq != c.seq || end != c.end {
			t.Errorf("%s: seq=%d end=%v err=%v", c.name, seq, end, err)
		}
		if err != nil && !errors.Is(err, ErrReplay) {
			t.Errorf("%s: error %v does not wrap ErrReplay", c.name, err)
		}
		if c.ok && !c.end && len(payload) != 1 {
			t.Errorf("%s: payload %x", c.name, payload)
		}
	}
}

package api

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// fastShapes are bodies the fast path must take, with the answer of the
// streaming decoder.
var fastShapes = []string{
	`{"sequence_hashes":[1,18446744073709551615,0]}`,
	`{"local_hashes":[]}`,
	` { "local_hashes" : [ 7 , 8 ] } ` + "\n",
	`{"tokens":[1,2,3,4,5,6,7,8,9],"block_size":4}`,
	`{"block_size":4,"tokens":[1,2,3,4,5,6,7,8,9]}`,
	`{"block_size":1,"tokens":[]}`,
	`{"tokens":[4294967295],"block_size":1}`,
	`{"model":"llama-8b","sequence_hashes":[1,2]}`,
	`{"sequence_hashes":[1,2],"domain":"qwen"}`,
	`{"block_size":4,"model":"m","tokens":[1,2,3,4]}`,
	`{"lora_name":"adapter-1","block_size":4,"tokens":[1,2,3,4,5,6,7,8]}`,
	`{"block_size":2,"cache_namespace":"tenant-a","eagle":true,"tokens":[1,2,3,4,5]}`,
	`{"eagle":false,"lora_name":"","tokens":[9,8,7,6],"block_size":2}`,
}

func TestFastPathTakesTheCommonShapesAndAgrees(t *testing.T) {
	for _, body := range fastShapes {
		got, ok := decodeFast([]byte(body))
		if !ok {
			t.Fatalf("%s: fast path declined", body)
		}
		want, err := DecodeMatchRequestFrom(strings.NewReader(body))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: fast %+v, streaming %+v %v", body, got, want, err)
		}
	}
}

// Everything else goes to the streaming decoder, so errors keep their
// exact messages.
func TestFastPathDeclinesWhatItIsNotSureOf(t *testing.T) {
	for _, body := range []string{
		``, `{}`, `[]`, `null`, `{"sequence_hashes":null}`, `{"sequence_hashes":[1],"sequence_hashes":[2]}`,
		`{"sequence_hashes":[1],"local_hashes":[2]}`, `{"sequence_hashes":[-1]}`, `{"sequence_hashes":[1.0]}`,
		`{"sequence_hashes":[1e3]}`, `{"sequence_hashes":[01]}`, `{"sequence_hashes":[18446744073709551616]}`,
		`{"sequence_hashes":[1,]}`, `{"sequence_hashes":[1]} x`, `{"sequence_hashes":[1]`, `{"Sequence_hashes":[1]}`,
		`{"sequence_hashes":[1],"x":1}`, `{"seq\u0075ence_hashes":[1]}`, `{"tokens":[1]}`, `{"block_size":4}`,
		`{"tokens":[1],"block_size":0}`, `{"tokens":[1],"block_size":65537}`, `{"tokens":[4294967296],"block_size":1}`,
		`{"tokens":[1],"block_size":4,"eagle":true}`, `{"tokens":[1],"block_size":4,"lora_name":"a"}`,
		`{"lora_name":"a","sequence_hashes":[1]}`, `{"lora_name":"a","block_size":4}`, `{"lora_name":null,"block_size":1,"tokens":[1]}`,
		`{"lora_name":"a","lora_name":"b","block_size":1,"tokens":[1]}`, `{"eagle":1,"block_size":1,"tokens":[1]}`,
		`{"eagle":truex,"block_size":1,"tokens":[1]}`, `{"lora_name":"a\u0062","block_size":1,"tokens":[1]}`,
		`{"block_size":4,"block_size":4,"tokens":[1]}`, `{"sequence_hashes":[1],"block_size":4}`,
		`{"sequence_hashes":[1 2]}`, `{"sequence_hashes":"1"}`,
	} {
		if q, ok := decodeFast([]byte(body)); ok {
			t.Fatalf("%q: fast path took it: %+v", body, q)
		}
	}
}

func TestFastPathLimitsMatchTheStreamingDecoder(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"sequence_hashes":[`)
	for i := range MaxBlocks + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i)
	}
	b.WriteString(`]}`)
	if _, ok := decodeFast(b.Bytes()); ok {
		t.Fatal("fast path took more than MaxBlocks hashes")
	}
	if _, err := DecodeMatchRequest(b.Bytes()); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("over MaxBlocks: %v", err)
	}
}

func FuzzDecodeFastAgreesWithTheStreamingDecoder(f *testing.F) {
	for _, s := range fastShapes {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"tokens":[1,2],"block_size":1,"eagle":true}`))
	f.Add([]byte(`{"block_size":1,"eagle":true,"tokens":[1,2],"lora_name":"x"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeFast(body)
		if !ok {
			return
		}
		want, err := DecodeMatchRequestFrom(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("fast path accepted %q, streaming refused it: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast %+v, streaming %+v", body, got, want)
		}
	})
}

func BenchmarkDecodeMatchRequest128(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"sequence_hashes":[`)
	for i := range 128 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprint(&body, uint64(i)*0x9e3779b97f4a7c15)
	}
	body.WriteString(`]}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeMatchRequest(body.Bytes()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("streaming", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeMatchRequestFrom(bytes.NewReader(body.Bytes())); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecode4MiBTokens decodes the largest token body (2M one-digit
// tokens, block size 64) with a LoRA name, through DecodeMatchBody (which
// takes the fast path) and through the streaming decoder alone (the
// baseline, and what such a body cost before the fast path took salts):
//
//	go test -run '^$' -bench Decode4MiBTokens ./pkg/api
func BenchmarkDecode4MiBTokens(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"lora_name":"adapter-7","block_size":64,"tokens":[1`)
	for body.Len()+4 <= MaxRequestBytes {
		body.WriteString(",1")
	}
	body.WriteString(`]}`)
	for _, c := range []struct {
		name   string
		decode func([]byte) (Query, error)
	}{
		{"body", DecodeMatchBody},
		{"streaming", func(p []byte) (Query, error) { return DecodeMatchRequestFrom(bytes.NewReader(p)) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(body.Len()))
			b.ReportAllocs()
			for b.Loop() {
				if q, err := c.decode(body.Bytes()); err != nil || len(q.Locals) == 0 {
					b.Fatal(q.Blocks(), err)
				}
			}
		})
	}
}

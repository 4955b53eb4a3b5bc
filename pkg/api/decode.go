package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
)

// DecodeMatchRequestFrom decodes and validates a match request read from r
// without holding the body: the JSON is walked value by value, hash arrays
// are decoded element by element (and refused as soon as they pass
// MaxBlocks), and a token array is hashed block by block while it is read
// when block_size (and any lora_name, cache_namespace, eagle) come before
// it. Tokens that come before block_size are kept as 4-byte integers until
// it is known. Callers bound r (the HTTP handler reads at most
// MaxRequestBytes).
func DecodeMatchRequestFrom(r io.Reader) (Query, error) {
	d := &matchDecoder{dec: json.NewDecoder(r), seen: map[string]bool{}}
	return d.decode()
}

type matchDecoder struct {
	dec  *json.Decoder
	seen map[string]bool

	blockSize      *int
	model          *string
	modelKey       string
	lora, ns       *string
	eagle          *bool
	locals         []ckf.LocalBlockHash
	seqs           []ckf.SequenceHash
	tokens         []uint32 // tokens read before block_size was known
	tokensGiven    bool
	tokensStreamed bool // hashed while read: salts may not follow
	localsGiven    bool
	seqsGiven      bool
	// route, when set, takes a route request's options (route.go).
	route *RouteOptions
}

func (d *matchDecoder) decode() (Query, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return Query{}, jsonError(err)
	}
	if tok != json.Delim('{') {
		return Query{}, &RequestError{Reason: "malformed JSON: want an object"}
	}
	for d.dec.More() {
		kt, err := d.dec.Token()
		if err != nil {
			return Query{}, jsonError(err)
		}
		key, _ := kt.(string)
		if d.seen[key] {
			return Query{}, &RequestError{Field: key, Reason: "given twice"}
		}
		d.seen[key] = true
		if err := d.field(key); err != nil {
			return Query{}, err
		}
	}
	if _, err := d.dec.Token(); err != nil { // the closing brace
		return Query{}, jsonError(err)
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return Query{}, &RequestError{Reason: "trailing data after the JSON object"}
	}
	return d.finish()
}

func (d *matchDecoder) field(key string) error {
	switch key {
	case "model", "domain":
		if d.modelKey != "" {
			return &RequestError{Field: key, Reason: "give one of model or domain"}
		}
		d.modelKey = key
		if err := d.scalar(key, &d.model); err != nil {
			return err
		}
		if d.model != nil && (*d.model == "" || len(*d.model) > MaxModelBytes) {
			return &RequestError{Field: key, Reason: fmt.Sprintf("must be 1..%d bytes", MaxModelBytes)}
		}
		return nil
	case "block_size":
		return d.scalar(key, &d.blockSize)
	case "lora_name":
		return d.salt(key, &d.lora)
	case "cache_namespace":
		return d.salt(key, &d.ns)
	case "eagle":
		if d.tokensStreamed {
			return &RequestError{Field: key, Reason: "must come before tokens once block_size was given"}
		}
		return d.scalar(key, &d.eagle)
	case "tokens":
		return d.readTokens()
	case "local_hashes":
		var err error
		d.localsGiven, err = readArray(d.dec, key, &d.locals)
		return err
	case "sequence_hashes":
		var err error
		d.seqsGiven, err = readArray(d.dec, key, &d.seqs)
		return err
	default:
		if d.route != nil {
			return d.routeField(key)
		}
		return &RequestError{Field: key, Reason: "unknown field"}
	}
}

func (d *matchDecoder) salt(key string, dst **string) error {
	if d.tokensStreamed {
		return &RequestError{Field: key, Reason: "must come before tokens once block_size was given"}
	}
	return d.scalar(key, dst)
}

// scalar decodes one value into *dst; null leaves it unset.
func (d *matchDecoder) scalar(key string, dst any) error {
	if err := d.dec.Decode(dst); err != nil {
		return fieldError(key, err)
	}
	return nil
}

// openArray consumes '[' (true) or null (false).
func openArray(dec *json.Decoder, key string) (bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return false, fieldError(key, err)
	}
	switch tok {
	case nil:
		return false, nil
	case json.Delim('['):
		return true, nil
	}
	return false, &RequestError{Field: key, Reason: fmt.Sprintf("cannot use %v as an array", tok)}
}

func closeArray(dec *json.Decoder, key string) error {
	if _, err := dec.Token(); err != nil {
		return fieldError(key, err)
	}
	return nil
}

// readArray decodes a hash array element by element into dst, refusing it
// as soon as it holds more than MaxBlocks values.
func readArray[T ~uint64](dec *json.Decoder, key string, dst *[]T) (bool, error) {
	open, err := openArray(dec, key)
	if !open || err != nil {
		return false, err
	}
	out := make([]T, 0, 64)
	var v uint64 // one for the array (see readTokens)
	for dec.More() {
		if len(out) == MaxBlocks {
			return false, &RequestError{Field: key, Reason: fmt.Sprintf("more than %d blocks", MaxBlocks)}
		}
		v = 0
		if err := dec.Decode(&v); err != nil {
			return false, fieldError(key, err)
		}
		out = append(out, T(v))
	}
	*dst = out
	return true, closeArray(dec, key)
}

// readTokens hashes the tokens block by block while reading them when the
// block size is known, else keeps them for finish.
func (d *matchDecoder) readTokens() error {
	open, err := openArray(d.dec, "tokens")
	if !open || err != nil {
		return err
	}
	d.tokensGiven = true
	var h *blockHasher
	if d.blockSize != nil {
		if err := checkBlockSize(*d.blockSize); err != nil {
			return err
		}
		h = newBlockHasher(*d.blockSize, d.options())
		d.tokensStreamed = true
	}
	// One v for the whole array: a fresh one per element would be a heap
	// allocation per token (it escapes through Decode).
	var v uint32
	for d.dec.More() {
		v = 0 // null leaves v as it is: it decodes as 0
		if err := d.dec.Decode(&v); err != nil {
			return fieldError("tokens", err)
		}
		if h == nil {
			d.tokens = append(d.tokens, v)
			continue
		}
		if err := h.add(v); err != nil {
			return err
		}
	}
	if h != nil {
		d.locals = h.out
	}
	return closeArray(d.dec, "tokens")
}

func (d *matchDecoder) options() ckf.BlockOptions {
	return ckf.BlockOptions{Seed: ckf.SaltedSeed(deref(d.lora), deref(d.ns)), Eagle: d.eagle != nil && *d.eagle}
}

func checkBlockSize(bs int) error {
	if bs <= 0 || bs > MaxBlockSize {
		return &RequestError{Field: "block_size", Reason: fmt.Sprintf("must be within 1..%d", MaxBlockSize)}
	}
	return nil
}

func (d *matchDecoder) finish() (Query, error) {
	q, err := d.query()
	if err == nil {
		q.Model = deref(d.model)
	}
	return q, err
}

func (d *matchDecoder) query() (Query, error) {
	given := 0
	for _, p := range []bool{d.tokensGiven, d.localsGiven, d.seqsGiven} {
		if p {
			given++
		}
	}
	if given != 1 {
		return Query{}, &RequestError{Field: "tokens|local_hashes|sequence_hashes", Reason: "exactly one must be given"}
	}
	switch {
	case d.tokensGiven:
		if d.blockSize == nil {
			return Query{}, &RequestError{Field: "block_size", Reason: "required with tokens"}
		}
		if d.tokensStreamed {
			return Query{Locals: d.locals, BlockSize: *d.blockSize}, nil
		}
		bs := *d.blockSize
		if err := checkBlockSize(bs); err != nil {
			return Query{}, err
		}
		if len(d.tokens)/bs > MaxBlocks {
			return Query{}, &RequestError{Field: "tokens", Reason: fmt.Sprintf("more than %d blocks", MaxBlocks)}
		}
		return Query{Locals: ckf.LocalBlockHashesWith(make([]ckf.LocalBlockHash, 0, len(d.tokens)/bs), d.tokens, bs, d.options()), BlockSize: bs}, nil
	case d.blockSize != nil:
		return Query{}, &RequestError{Field: "block_size", Reason: "only valid with tokens"}
	case d.lora != nil:
		return Query{}, &RequestError{Field: "lora_name", Reason: "only valid with tokens"}
	case d.ns != nil:
		return Query{}, &RequestError{Field: "cache_namespace", Reason: "only valid with tokens"}
	case d.eagle != nil:
		return Query{}, &RequestError{Field: "eagle", Reason: "only valid with tokens"}
	case d.localsGiven:
		return Query{Locals: d.locals}, nil
	default:
		return Query{Seqs: d.seqs}, nil
	}
}

// blockHasher collects the hashes of a token stream, refusing more than
// MaxBlocks blocks.
type blockHasher struct {
	h   ckf.TokenHasher
	out []ckf.LocalBlockHash
}

func newBlockHasher(bs int, o ckf.BlockOptions) *blockHasher {
	return &blockHasher{h: ckf.NewTokenHasher(bs, o), out: []ckf.LocalBlockHash{}}
}

func (h *blockHasher) add(v uint32) error {
	sum, ok := h.h.Add(v)
	if !ok {
		return nil
	}
	if len(h.out) == MaxBlocks {
		return &RequestError{Field: "tokens", Reason: fmt.Sprintf("more than %d blocks", MaxBlocks)}
	}
	h.out = append(h.out, sum)
	return nil
}

// fieldError maps a decode error of key's value to a RequestError naming it.
func fieldError(key string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &RequestError{Field: key, Reason: fmt.Sprintf("cannot use %s as %s", te.Value, te.Type)}
	}
	var re *RequestError
	if errors.As(err, &re) {
		return re
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &RequestError{Field: key, Reason: "truncated request body"}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &RequestError{Field: key, Reason: "malformed JSON: " + err.Error()}
	}
	return &RequestError{Field: key, Reason: "reading body: " + err.Error()}
}

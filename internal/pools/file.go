package pools

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"gopkg.in/yaml.v3"

	"github.com/ckfrelay/ckfrelay/pkg/ckf"
	"github.com/ckfrelay/ckfrelay/pkg/kvrelay/server"
	"github.com/ckfrelay/ckfrelay/pkg/wire"
)

// MaxFileBytes bounds a pools file.
const MaxFileBytes = 1 << 20

// File is the pools file of a relay process:
//
//	max_pools: 16            # pools run at most (0: DefaultMaxPools)
//	allow: ["qwen*", "llama-*"]  # domains that appear on their first event
//	pools:                   # declared pools, started at once
//	  - domain: llama
//	    expected_blocks: 1048576   # optional: --expected-blocks
//	    max_tracked_blocks: 0      # optional: --max-tracked-blocks
//	    seed: 0                    # optional: --seed
//	    mode: canonical            # optional: --mode
//	    kvrelay:                   # optional: served over dynamo.kvrelay.v1
//	      model: meta-llama/Llama-3.1-8B-Instruct  # default: the domain
//	      source_path: meta-llama/Llama-3.1-8B     # default: model
//	      aliases: [llama]
//	      endpoint: prod/backend/generate # default: --kvrelay-endpoint
//	      block_size: 64                  # default: --kvrelay-block-size
//	      roles: [aggregated]             # default: --kvrelay-roles
//
// A discovered pool takes the command line's sizing, and over kvrelay the
// domain as its model with the command line's endpoint, block size and
// roles.
type File struct {
	MaxPools int        `yaml:"max_pools"`
	Allow    []string   `yaml:"allow"`
	Pools    []PoolSpec `yaml:"pools"`
}

// PoolSpec declares one pool; zero fields take the process's flags.
type PoolSpec struct {
	Domain           string `yaml:"domain"`
	ExpectedBlocks   uint64 `yaml:"expected_blocks"`
	MaxTrackedBlocks uint64 `yaml:"max_tracked_blocks"`
	Seed             uint64 `yaml:"seed"`
	Mode             string `yaml:"mode"`
	// KvRelay is the pool's dynamo.kvrelay.v1 descriptor metadata (nil:
	// every field takes its default, see KvRelaySpec).
	KvRelay *KvRelayBlock `yaml:"kvrelay"`
}

// KvRelayBlock is a pool's kvrelay block: the fields of relay-producer's
// --kvrelay-* flags for one pool (server.PoolText).
type KvRelayBlock struct {
	Model      string   `yaml:"model"`
	SourcePath string   `yaml:"source_path"`
	Aliases    []string `yaml:"aliases"`
	Endpoint   string   `yaml:"endpoint"`
	BlockSize  uint64   `yaml:"block_size"`
	Roles      []string `yaml:"roles"`
}

// KvRelaySpec is the descriptor metadata the pool is served with over
// dynamo.kvrelay.v1: its kvrelay block, where a field is empty the model
// being the domain and the endpoint, block size and roles those of
// defaults (the process's --kvrelay-* flags). The model, source path and
// aliases never come from defaults: they name one model. The result is
// checked as the flags are (server.PoolText.Spec).
func (p PoolSpec) KvRelaySpec(defaults server.PoolText) (server.PoolSpec, error) {
	t := server.PoolText{Model: p.Domain, Endpoint: defaults.Endpoint, BlockSize: defaults.BlockSize, Roles: defaults.Roles}
	if b := p.KvRelay; b != nil {
		t.SourcePath, t.Aliases = b.SourcePath, b.Aliases
		if b.Model != "" {
			t.Model = b.Model
		}
		if b.Endpoint != "" {
			t.Endpoint = b.Endpoint
		}
		if b.BlockSize != 0 {
			t.BlockSize = b.BlockSize
		}
		if len(b.Roles) > 0 {
			t.Roles = b.Roles
		}
	}
	spec, err := t.Spec()
	if err != nil {
		return server.PoolSpec{}, fmt.Errorf("pools: %s: kvrelay %w", p.Domain, err)
	}
	return spec, nil
}

// ErrFile is a pools file that does not parse or validate.
var ErrFile = errors.New("pools: file")

// ReadFile reads and validates a pools file.
func ReadFile(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return File{}, fmt.Errorf("%w: %w", ErrFile, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return File{}, fmt.Errorf("%w: %s: %w", ErrFile, name, err)
	}
	return ParseFile(b)
}

// ParseFile decodes and validates a pools file: unknown keys, duplicate or
// invalid domains, bad patterns and modes are refused.
func ParseFile(b []byte) (File, error) {
	if len(b) > MaxFileBytes {
		return File{}, fmt.Errorf("%w: more than %d bytes", ErrFile, MaxFileBytes)
	}
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return File{}, fmt.Errorf("%w: %w", ErrFile, err)
	}
	if f.MaxPools < 0 {
		return File{}, fmt.Errorf("%w: max_pools %d: want 0 (default) or more", ErrFile, f.MaxPools)
	}
	for _, p := range f.Allow {
		if _, err := path.Match(p, ""); err != nil {
			return File{}, fmt.Errorf("%w: allow %q: %w", ErrFile, p, err)
		}
	}
	seen := map[string]bool{}
	for i, p := range f.Pools {
		if err := wire.ValidateName("domain", p.Domain); err != nil {
			return File{}, fmt.Errorf("%w: pools[%d]: %w", ErrFile, i, err)
		}
		if seen[p.Domain] {
			return File{}, fmt.Errorf("%w: pools[%d]: domain %q declared twice", ErrFile, i, p.Domain)
		}
		seen[p.Domain] = true
		if p.Mode != "" {
			if _, err := ckf.ParseHashMode(p.Mode); err != nil {
				return File{}, fmt.Errorf("%w: pools[%d]: %w", ErrFile, i, err)
			}
		}
	}
	if f.MaxPools > 0 && len(f.Pools) > f.MaxPools {
		return File{}, fmt.Errorf("%w: %d pools declared, max_pools %d", ErrFile, len(f.Pools), f.MaxPools)
	}
	return f, nil
}

// Declared returns the spec the file declares for domain, or a spec of the
// domain alone (the process's sizing) and false.
func (f File) Declared(domain string) (PoolSpec, bool) {
	for _, p := range f.Pools {
		if p.Domain == domain {
			return p, true
		}
	}
	return PoolSpec{Domain: domain}, false
}

// Allows reports whether domain may appear on its first event.
func (f File) Allows(domain string) bool {
	for _, p := range f.Allow {
		if ok, _ := path.Match(p, domain); ok {
			return true
		}
	}
	return false
}

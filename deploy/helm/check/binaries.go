package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// rootModule is the module path of the binaries.
const rootModule = "github.com/ckfrelay/ckfrelay"

// Binaries are the ckfrelay image's programs, built from the repository
// the chart lives in: a container's arguments are parsed by the very
// program the image runs, and its probes asked of the paths that program
// registers.
type Binaries struct {
	repo string
	dir  string
	// InImage are the programs deploy/images/ckfrelay.Dockerfile copies
	// into the image.
	InImage map[string]bool
	built   map[string]bool
	paths   map[string]map[string]bool
}

// FindRepo walks up from dir to the directory whose go.mod is the
// binaries' module.
func FindRepo(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module "+rootModule+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", rootModule)
		}
		dir = parent
	}
}

// NewBinaries reads the image's program list and builds names (the
// programs the chart runs) into outDir.
func NewBinaries(ctx context.Context, repo, outDir string, names []string) (*Binaries, error) {
	b := &Binaries{repo: repo, dir: outDir, built: map[string]bool{}, paths: map[string]map[string]bool{}}
	var err error
	if b.InImage, err = imagePrograms(filepath.Join(repo, "deploy/images/ckfrelay.Dockerfile")); err != nil {
		return nil, err
	}
	args := []string{"build", "-o", outDir + string(filepath.Separator)}
	for _, n := range names {
		if !b.InImage[n] {
			return nil, fmt.Errorf("%s is not in the image (deploy/images/ckfrelay.Dockerfile)", n)
		}
		args = append(args, "./cmd/"+n)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, n := range names {
		b.built[n] = true
		if b.paths[n], err = servedPaths(ctx, repo, n); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// imagePrograms reads the programs the Dockerfile's COPY line puts at /.
func imagePrograms(dockerfile string) (map[string]bool, error) {
	f, err := os.Open(dockerfile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	progs := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 2 && fields[0] == "COPY" && fields[len(fields)-1] == "/" {
			for _, p := range fields[1 : len(fields)-1] {
				progs[p] = true
			}
		}
	}
	if len(progs) == 0 {
		return nil, fmt.Errorf("%s: no COPY ... / line", dockerfile)
	}
	return progs, sc.Err()
}

// servedPaths are the GET paths a program's HTTP muxes register: every
// HandleFunc/Handle call with a "GET /path" literal in the packages of
// this module the program links. "/{$}" counts as "/".
func servedPaths(ctx context.Context, repo, name string) (map[string]bool, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f",
		`{{with .Module}}{{if eq .Path "`+rootModule+`"}}{{$.Dir}}|{{join $.GoFiles ","}}{{end}}{{end}}`, "./cmd/"+name)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps ./cmd/%s: %w", name, err)
	}
	paths := map[string]bool{}
	fset := token.NewFileSet()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir, files, ok := strings.Cut(line, "|")
		if !ok || files == "" {
			continue
		}
		for _, f := range strings.Split(files, ",") {
			af, err := parser.ParseFile(fset, filepath.Join(dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			ast.Inspect(af, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				pattern, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				if p, ok := strings.CutPrefix(pattern, "GET "); ok {
					paths[strings.TrimSuffix(p, "{$}")] = true
				}
				return true
			})
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("./cmd/%s registers no GET path", name)
	}
	return paths, nil
}

// Serves reports whether program name registers path (its query ignored).
func (b *Binaries) Serves(name, path string) bool {
	p, _, _ := strings.Cut(path, "?")
	return b.paths[name][p]
}

// ErrArgs is a container's arguments refused by its program.
var ErrArgs = errors.New("arguments refused")

// CheckConfig runs program name with args and --check-config (parse, the
// files the flags name read and checked, no connection) in an environment
// holding only env, and returns its refusal.
func (b *Binaries) CheckConfig(ctx context.Context, name string, args, env []string) error {
	if !b.built[name] {
		return fmt.Errorf("%s was not built", name)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.dir, name), append(append([]string{}, args...), "--check-config")...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s %s: %v: %s", ErrArgs, name, strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	if !strings.Contains(stderr.String(), "configuration ok") {
		return fmt.Errorf("%w: %s did not confirm --check-config: %s", ErrArgs, name, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// lastLine is the error line a program prints after its usage.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

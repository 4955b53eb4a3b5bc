// Package doclinks checks that the project's Markdown documentation points
// only at things that exist inside the repository: every relative link
// (and its #anchor, by GitHub's heading slugs) and every repository path
// cited in inline code, such as `scripts/demo.sh` or `internal/relay`.
// Links to other sites are not fetched.
package doclinks

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Problem is one broken reference.
type Problem struct {
	File   string // the Markdown file, relative to the root
	Line   int    // 1-based
	Target string // the link target or cited path as written
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

var (
	// [text](target) and ![alt](target), with an optional "title".
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// [label]: target
	refLink  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// A cited path: path characters only, with at least one slash.
	pathLike = regexp.MustCompile(`^(?:\.\./|\./)?[A-Za-z0-9_.*\-]+(?:/[A-Za-z0-9_.*\-]*)+$`)
	htmlID   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	heading  = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// Checker resolves references against one repository root.
type Checker struct {
	root    string
	ignored []string            // root-relative prefixes of generated paths (.gitignore's anchored entries)
	anchors map[string][]string // Markdown file → its anchors, memoised
	top     map[string]bool     // the root's entries: a cited path must start with one
}

// New returns a Checker for the repository at root. Paths that .gitignore
// anchors at the root (generated files such as /bin/ or /deploy/certs/)
// may be cited without existing.
func New(root string) (*Checker, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("doclinks: %w", err)
	}
	c := &Checker{root: root, anchors: map[string][]string{}, top: map[string]bool{}}
	for _, e := range entries {
		c.top[e.Name()] = true
	}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") && !strings.ContainsAny(l, "*?[") {
				c.ignored = append(c.ignored, strings.TrimSuffix(strings.TrimPrefix(l, "/"), "/"))
			}
		}
	}
	return c, nil
}

// CheckFile checks one Markdown file, named relative to the root.
func (c *Checker) CheckFile(rel string) ([]Problem, error) {
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("doclinks: %w", err)
	}
	var out []Problem
	add := func(line int, target, reason string) {
		out = append(out, Problem{File: rel, Line: line, Target: target, Reason: reason})
	}
	dir := path.Dir(rel)
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if reason := c.checkLink(dir, rel, t); reason != "" {
				add(n, t, reason)
			}
		}
		// Inline code outside links' targets: cited repository paths.
		for _, m := range codeSpan.FindAllStringSubmatch(inlineLink.ReplaceAllString(line, "[$1]"), -1) {
			if reason := c.checkCited(m[1]); reason != "" {
				add(n, m[1], reason)
			}
		}
	}
	return out, sc.Err()
}

// checkLink resolves a link target written in file rel (in directory dir).
func (c *Checker) checkLink(dir, rel, target string) string {
	if i := strings.Index(target, ":"); i > 0 && !strings.ContainsAny(target[:i], "/#.") {
		return "" // a scheme: https:, mailto:
	}
	if strings.HasPrefix(target, "//") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	if strings.Contains(file, "?") {
		file, _, _ = strings.Cut(file, "?")
	}
	resolved := rel
	if file != "" {
		if strings.HasPrefix(file, "/") {
			return "absolute path: link relative to the file instead"
		}
		resolved = path.Clean(path.Join(dir, file))
		if resolved == ".." || strings.HasPrefix(resolved, "../") {
			return "points outside the repository"
		}
		if !c.exists(resolved) {
			return "no such file in the repository"
		}
	}
	if anchor == "" || !strings.HasSuffix(resolved, ".md") {
		return ""
	}
	anchors, err := c.anchorsOf(resolved)
	if err != nil {
		return err.Error()
	}
	for _, a := range anchors {
		if a == anchor {
			return ""
		}
	}
	return fmt.Sprintf("no heading with anchor #%s in %s", anchor, resolved)
}

// checkCited checks inline code that names a repository path: it must
// start with one of the root's entries (so Go import paths, subjects and
// container paths are left alone) or climb out of the root, which no
// reference may. Placeholders (<dc>, $VAR, …) are not paths.
func (c *Checker) checkCited(span string) string {
	span = strings.TrimSpace(span)
	if i := strings.LastIndex(span, ":"); i > 0 && strings.Trim(span[i+1:], "0123456789-") == "" {
		span = span[:i] // path:line
	}
	if !pathLike.MatchString(span) {
		return ""
	}
	if strings.HasPrefix(span, "../") {
		return "points outside the repository"
	}
	p := strings.TrimPrefix(span, "./")
	first, _, _ := strings.Cut(p, "/")
	if !c.top[first] {
		return ""
	}
	p = strings.TrimSuffix(p, "/")
	if strings.Contains(p, "*") {
		m, err := filepath.Glob(filepath.Join(c.root, filepath.FromSlash(p)))
		if err != nil || len(m) == 0 {
			return "no file in the repository matches"
		}
		return ""
	}
	if !c.exists(p) {
		return "no such file in the repository"
	}
	return ""
}

func (c *Checker) exists(rel string) bool {
	for _, ig := range c.ignored {
		if rel == ig || strings.HasPrefix(rel, ig+"/") {
			return true
		}
	}
	_, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	return err == nil
}

func (c *Checker) anchorsOf(rel string) ([]string, error) {
	if a, ok := c.anchors[rel]; ok {
		return a, nil
	}
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	a := Anchors(src)
	c.anchors[rel] = a
	return a, nil
}

// Anchors lists the anchors GitHub gives a Markdown document: one per
// heading (Slug of its text, "-1", "-2", … appended to repeats) and every
// <a id="…"> or <a name="…">.
func Anchors(src []byte) []string {
	var out []string
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(src), "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := Slug(m[2])
		if k := seen[s]; k > 0 {
			out = append(out, fmt.Sprintf("%s-%d", s, k))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	return out
}

var (
	linkText = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)
	htmlTag  = regexp.MustCompile(`<[^>]+>`)
)

// Slug is GitHub's anchor for a heading: the rendered text (links reduced
// to their text, HTML tags and Markdown emphasis dropped) in lower case,
// without punctuation other than '-' and '_', spaces turned into '-'.
func Slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	h = htmlTag.ReplaceAllString(h, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsDigit(r), unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
